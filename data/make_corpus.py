#!/usr/bin/env python3
"""Builds data/corpus.txt: the public-domain passages in data/sources/, then
fables generated from a small grammar until the file reaches TARGET_BYTES.

Deterministic: the generator uses its own 64-bit LCG (not Python's random),
so the same script writes the same bytes on any Python 3. Run it from
anywhere; it writes next to itself. The output is committed, so the trainer
never runs this script.
"""
import os

TARGET_BYTES = 160 * 1024
HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = ["declaration.txt", "gettysburg.txt", "kjv.txt", "sonnets.txt", "aesop.txt"]


class Lcg:
    """Knuth's MMIX LCG; the high bits are used, the low bits are weak."""

    def __init__(self, seed):
        self.state = seed & 0xFFFFFFFFFFFFFFFF

    def below(self, n):
        self.state = (self.state * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        return (self.state >> 33) % n

    def pick(self, items):
        return items[self.below(len(items))]


ANIMALS = ["Fox", "Crow", "Lion", "Mouse", "Hare", "Tortoise", "Wolf", "Lamb", "Goat", "Ass",
           "Horse", "Ox", "Frog", "Stork", "Eagle", "Owl", "Bear", "Deer", "Dog", "Cat",
           "Cock", "Swan", "Ant", "Bee", "Heron", "Monkey", "Camel", "Boar", "Kid", "Raven"]
ADJECTIVES = ["hungry", "proud", "clever", "foolish", "old", "young", "greedy", "humble", "idle",
              "patient", "vain", "honest", "timid", "bold", "weary", "careless", "thirsty", "wise"]
PLACES = ["at the edge of a wood", "beside a quiet river", "on a high hill", "in a farmer's barn",
          "near the village well", "under an old oak", "in a field of barley", "by the sea shore",
          "among the reeds of a marsh", "in a cave among the rocks"]
SEASONS = ["One summer morning", "Late one autumn evening", "In the depth of winter",
           "Early in the spring", "On a hot afternoon", "One windy night", "At the break of day"]
WANTS = ["a piece of cheese", "a bunch of ripe grapes", "a warm place to sleep", "a drink of water",
         "the praise of the other beasts", "a share of the farmer's corn", "a crown of leaves",
         "the honey in a hollow tree", "a safe road home", "the finest fish in the river"]
ACTIONS = ["boasted to every creature it met", "tried to take it by force", "waited and watched",
           "asked its neighbours for help", "laid a cunning plan", "worked from dawn until dusk",
           "pretended to be asleep", "flattered the one who had it", "ran off to fetch a friend",
           "sang a song to pass the time"]
OUTCOMES = ["lost everything it had", "was laughed at by the whole wood", "won what it wanted at last",
            "found a true friend", "was caught in the hunter's net", "went home with nothing",
            "shared the prize with the others", "learned its lesson too late", "was saved by a small creature",
            "fell into the water"]
SPEECH = ["Slow and sure goes far", "A friend in need is a friend indeed", "Look before you leap",
          "Pride goes before a fall", "Many hands make light work", "Be content with your lot",
          "Do not trust a flatterer", "Honesty is the best policy", "Union gives strength",
          "Self-help is the best help", "Gratitude is the sign of noble souls",
          "It is easy to be brave from a safe distance", "Appearances are deceptive",
          "Every tale can be told in a different way", "Plodding wins the race",
          "The smallest gift given freely is the greatest", "He that is content has enough"]


def art(word):
    return ("an " if word[0].lower() in "aeiou" else "a ") + word


def sentence(rng, a, b):
    forms = [
        lambda: f"The {a} said to the {b}, \"{rng.pick(SPEECH)}, my friend.\"",
        lambda: f"The {b} did not answer, but turned away {rng.pick(PLACES)}.",
        lambda: f"Then the {a} {rng.pick(ACTIONS)}, and the {b} {rng.pick(ACTIONS)}.",
        lambda: f"\"Why do you look so {rng.pick(ADJECTIVES)}?\" asked the {b}.",
        lambda: f"\"Because I want {rng.pick(WANTS)},\" replied the {a}.",
        lambda: f"So the {a} {rng.pick(ACTIONS)}, and in the end it {rng.pick(OUTCOMES)}.",
        lambda: f"{rng.pick(SEASONS)} the {b} came by {rng.pick(PLACES)} and saw the {a}.",
        lambda: f"The {a} thought for a long while, for it wanted {rng.pick(WANTS)}.",
    ]
    return rng.pick(forms)()


def fable(rng):
    a, b = rng.pick(ANIMALS), rng.pick(ANIMALS)
    while b == a:
        b = rng.pick(ANIMALS)
    title = f"The {rng.pick(ADJECTIVES).capitalize()} {a} and the {b}."
    opening = (f"{rng.pick(SEASONS)} {art(rng.pick(ADJECTIVES))} {a} lived {rng.pick(PLACES)}. "
               f"It wanted {rng.pick(WANTS)} more than anything in the world.")
    body = " ".join(sentence(rng, a, b) for _ in range(3 + rng.below(5)))
    moral = f"{rng.pick(SPEECH)}."
    return f"{title}\n\n{opening} {body} {moral}\n"


def main():
    parts = []
    for name in SOURCES:
        with open(os.path.join(HERE, "sources", name), encoding="utf-8") as f:
            parts.append(f.read().strip() + "\n")
    text = "\n".join(parts)
    text += "\nMore fables, generated from a small grammar.\n\n"
    rng = Lcg(20240601)
    while len(text.encode("utf-8")) < TARGET_BYTES:
        text += fable(rng) + "\n"
    with open(os.path.join(HERE, "corpus.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    print(f"wrote {len(text.encode('utf-8'))} bytes to data/corpus.txt")


if __name__ == "__main__":
    main()

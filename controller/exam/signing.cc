#include "controller/exam/signing.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "controller/exam/crypto.h"

namespace firedrill::controller {

namespace {

using json = nlohmann::json;

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct CtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
struct PkeyCtxFree {
  void operator()(EVP_PKEY_CTX* c) const { EVP_PKEY_CTX_free(c); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;

std::string Canonical(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// What the key signs: the format's name, then the result. Nothing else the
// key might sign can pass for a result.
std::string SignedBytes(const json& result) { return std::string(kResultFormat) + "\n" + Canonical(result); }

std::string BioText(BIO* b) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(b, &data);
  return n > 0 ? std::string(data, static_cast<size_t>(n)) : std::string();
}

StatusOr<std::string> RawPublicKey(EVP_PKEY* key) {
  unsigned char raw[64];
  size_t len = sizeof(raw);
  if (EVP_PKEY_get_raw_public_key(key, raw, &len) != 1) return Internal("cannot read the Ed25519 public key");
  return std::string(reinterpret_cast<const char*>(raw), len);
}

StatusOr<std::string> KeyIdOf(EVP_PKEY* key) {
  auto raw = RawPublicKey(key);
  if (!raw.ok()) return raw.status();
  return Sha256Hex(*raw).substr(0, 16);
}

// Never prompt for a pass phrase: an encrypted key is not one we wrote.
int NoPassphrase(char*, int, int, void*) { return 0; }

// Writes `text` to a fresh private file beside `path`, then links it in as
// `path`: AlreadyExists when a key is there already (another process made
// it first), so a key is never replaced.
Status CreateKeyFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".new-" + std::to_string(::getpid()) + "-" + HexEncode(RandomBytes(4));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return FailedPrecondition("cannot write the signing key " + tmp + ": " + std::strerror(errno));
  const bool ok =
      ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  const int write_err = errno;
  ::close(fd);
  if (!ok) {
    ::unlink(tmp.c_str());
    return FailedPrecondition("cannot write the signing key " + tmp + ": " + std::strerror(write_err));
  }
  const int rc = ::link(tmp.c_str(), path.c_str());
  const int link_err = errno;
  ::unlink(tmp.c_str());
  if (rc != 0 && link_err == EEXIST) return AlreadyExists(path);
  if (rc != 0)
    return FailedPrecondition("cannot write the signing key " + path + ": " + std::strerror(link_err));
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);  // the new name survives a crash
    ::close(dfd);
  }
  return Status::Ok();
}

// The key in `path`; NotFound when no file is there.
StatusOr<std::unique_ptr<EVP_PKEY, PkeyFree>> LoadKeyFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFound(path);
    return FailedPrecondition("cannot read the signing key " + path + ": " + std::strerror(errno) +
                              " (it is kept, never replaced: results were signed with it)");
  }
  std::string pem;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) pem.append(buf, static_cast<size_t>(n));
  ::close(fd);
  Bio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Pkey key(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr) : nullptr);
  if (n < 0 || !key || EVP_PKEY_get_id(key.get()) != EVP_PKEY_ED25519)
    return FailedPrecondition(path +
                              ": holds no Ed25519 private key in PEM; results signed before were signed with "
                              "the key that was there: restore it, or move the file away to make a new key");
  (void)::chmod(path.c_str(), 0600);
  return key;
}

// Text from a file that is safe to print in a message.
std::string Printable(const std::string& s) {
  if (s.size() > 64) return "(a long value)";
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.')
      return "(not printable)";
  return "'" + s + "'";
}

}  // namespace

ResultSigner::ResultSigner(EVP_PKEY* key) : key_(key) {
  auto id = KeyIdOf(key_);
  key_id_ = id.ok() ? *id : "";
}

ResultSigner::~ResultSigner() { EVP_PKEY_free(key_); }

StatusOr<std::unique_ptr<ResultSigner>> ResultSigner::LoadOrCreate(const std::string& path) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto loaded = LoadKeyFile(path);
    if (loaded.ok()) {
      auto signer = std::unique_ptr<ResultSigner>(new ResultSigner(loaded->release()));
      if (signer->key_id_.empty()) return Internal(path + ": cannot read the key's public half");
      return signer;
    }
    if (loaded.status().code() != StatusCode::kNotFound) return loaded.status();
    std::unique_ptr<EVP_PKEY_CTX, PkeyCtxFree> ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nullptr));
    EVP_PKEY* raw = nullptr;
    if (!ctx || EVP_PKEY_keygen_init(ctx.get()) != 1 || EVP_PKEY_keygen(ctx.get(), &raw) != 1)
      return Internal("cannot make an Ed25519 key (OpenSSL)");
    Pkey key(raw);
    Bio bio(BIO_new(BIO_s_mem()));
    if (!bio || PEM_write_bio_PrivateKey(bio.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1)
      return Internal("cannot encode the new signing key");
    const Status made = CreateKeyFile(path, BioText(bio.get()));
    if (made.code() == StatusCode::kAlreadyExists) continue;  // another process made one first: use it
    if (!made.ok()) return made;
    auto signer = std::unique_ptr<ResultSigner>(new ResultSigner(key.release()));
    if (signer->key_id_.empty()) return Internal(path + ": cannot read the new key's public half");
    return signer;
  }
  return FailedPrecondition(path + ": the signing key appeared and vanished while it was being made");
}

std::string ResultSigner::PublicKeyPem() const {
  Bio bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PUBKEY(bio.get(), key_) != 1) return "";
  return BioText(bio.get());
}

std::string ResultSigner::Sign(const std::string& bytes) const {
  std::unique_ptr<EVP_MD_CTX, CtxFree> ctx(EVP_MD_CTX_new());
  unsigned char sig[64];
  size_t len = sizeof(sig);
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, key_) != 1 ||
      EVP_DigestSign(ctx.get(), sig, &len, reinterpret_cast<const unsigned char*>(bytes.data()),
                     bytes.size()) != 1)
    return "";
  return std::string(reinterpret_cast<const char*>(sig), len);
}

StatusOr<std::string> ResultSigner::SignResult(const json& result_in) const {
  if (!result_in.is_object()) return InvalidArgument("a result to sign must be a JSON object");
  // Read back through the canonical text, so that what is signed is what
  // the file will hold (bytes that are not UTF-8 replaced here too).
  const json result = json::parse(Canonical(result_in));
  if (!result.contains("format") || result["format"] != kResultFormat)
    return InvalidArgument(std::string("a result to sign needs \"format\": \"") + kResultFormat + "\"");
  const std::string sig = Sign(SignedBytes(result));
  if (sig.size() != 64) return Internal("Ed25519 signing failed (OpenSSL)");
  const json doc = {{"result", result},
                    {"signature", {{"alg", "Ed25519"}, {"key", key_id_}, {"value", HexEncode(sig)}}}};
  return Canonical(doc) + "\n";
}

StatusOr<std::string> PublicKeyId(const std::string& public_key_pem) {
  Bio bio(BIO_new_mem_buf(public_key_pem.data(), static_cast<int>(public_key_pem.size())));
  Pkey key(bio ? PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!key || EVP_PKEY_get_id(key.get()) != EVP_PKEY_ED25519)
    return InvalidArgument("not an Ed25519 public key in PEM (export one with `firedrill exam pubkey`)");
  return KeyIdOf(key.get());
}

StatusOr<std::string> VerifySignedResult(const std::string& text, const std::string& public_key_pem,
                                         const std::string& where) {
  Bio bio(BIO_new_mem_buf(public_key_pem.data(), static_cast<int>(public_key_pem.size())));
  Pkey key(bio ? PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!key || EVP_PKEY_get_id(key.get()) != EVP_PKEY_ED25519)
    return InvalidArgument(
        "the public key is not an Ed25519 key in PEM (export one with `firedrill exam pubkey`)");
  const std::string form = where + ": not a signed result as firedrill writes it";
  if (text.empty() || text.back() != '\n' || text.find('\n') != text.size() - 1)
    return DataLoss(form + " (one line of JSON and a newline): the file was edited or damaged");
  const std::string line = text.substr(0, text.size() - 1);
  json doc;
  try {
    doc = json::parse(line);
  } catch (const json::exception&) {
    return DataLoss(form + " (it is not JSON): the file was edited or damaged");
  }
  const bool shaped = doc.is_object() && doc.size() == 2 && doc.contains("result") &&
                      doc["result"].is_object() && doc.contains("signature") &&
                      doc["signature"].is_object() && doc["signature"].size() == 3 &&
                      doc["signature"].contains("alg") && doc["signature"]["alg"].is_string() &&
                      doc["signature"].contains("key") && doc["signature"]["key"].is_string() &&
                      doc["signature"].contains("value") && doc["signature"]["value"].is_string();
  if (!shaped) return DataLoss(form + " (it needs exactly result and signature: alg, key, value): edited");
  if (Canonical(doc) != line)
    return DataLoss(form +
                    " (spacing, key order or escapes differ from the signed form): the file was edited");
  const json& sig = doc["signature"];
  if (sig["alg"] != "Ed25519")
    return DataLoss(where + ": signed with " + Printable(sig["alg"].get<std::string>()) +
                    ", not Ed25519: edited");
  if (!doc["result"].contains("format") || doc["result"]["format"] != kResultFormat)
    return DataLoss(where + ": not an exam result (its format is not " + kResultFormat + ")");
  auto id = KeyIdOf(key.get());
  if (!id.ok()) return id.status();
  if (sig["key"] != *id)
    return DataLoss(
        where + ": signed by key " + Printable(sig["key"].get<std::string>()) + ", not by the key given (" +
        *id +
        "): check that the public key is this controller's (`firedrill exam pubkey`), or the file "
        "was edited");
  auto value = HexDecode(sig["value"].get<std::string>());
  if (!value || value->size() != 64 || HexEncode(*value) != sig["value"].get<std::string>())
    return DataLoss(where + ": the signature is not 64 bytes of lowercase hex: the file was edited");
  const std::string signed_text = SignedBytes(doc["result"]);
  std::unique_ptr<EVP_MD_CTX, CtxFree> ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, key.get()) != 1)
    return Internal("cannot start an Ed25519 verification (OpenSSL)");
  const int ok =
      EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(value->data()), value->size(),
                       reinterpret_cast<const unsigned char*>(signed_text.data()), signed_text.size());
  if (ok != 1)
    return DataLoss(where +
                    ": the signature does not match the result: the result was changed after signing");
  return Canonical(doc["result"]);
}

}  // namespace firedrill::controller

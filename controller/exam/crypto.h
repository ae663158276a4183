// The few OpenSSL primitives the exam code needs, as plain functions on
// strings of bytes.
#pragma once

#include <optional>
#include <string>

namespace firedrill::controller {

// Lowercase hex of `bytes`.
std::string HexEncode(const std::string& bytes);
// The bytes of lowercase or uppercase hex; nullopt for an odd length or a
// non-hex character.
std::optional<std::string> HexDecode(const std::string& hex);

// Raw 32-byte SHA-256 of `bytes`, and its lowercase hex.
std::string Sha256(const std::string& bytes);
inline std::string Sha256Hex(const std::string& bytes) { return HexEncode(Sha256(bytes)); }

// Raw 32-byte HMAC-SHA256 of `message` under `key`.
std::string HmacSha256(const std::string& key, const std::string& message);

// `n` bytes from OpenSSL's CSPRNG (aborts if it cannot seed: a token or a
// key from a bad generator is worse than no exam).
std::string RandomBytes(size_t n);

// Constant-time equality of two secrets (false when either is empty).
bool SameSecret(const std::string& a, const std::string& b);

}  // namespace firedrill::controller

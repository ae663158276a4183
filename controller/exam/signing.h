// Exam results signed with Ed25519 (OpenSSL), so that a result file can be
// checked without the controller: `firedrill exam verify RESULT.json
// --pubkey KEY.pem`. The key lives in the controller's private state dir;
// `firedrill exam pubkey` exports its public half.
//
// A signed result is one line of canonical JSON (keys sorted, no spaces):
//   {"result":{...},"signature":{"alg":"Ed25519","key":"<key id>","value":"<hex>"}}
// The signature is over "firedrill-exam-result/1\n" and the canonical text of
// "result", whose "format" must be that string: the key signs nothing else
// that could pass for a result. A file that is not exactly in that form is
// refused before the signature is checked, so that no change to any byte of
// it (spacing included) can go unnoticed.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"

typedef struct evp_pkey_st EVP_PKEY;

namespace firedrill::controller {

inline constexpr const char* kResultFormat = "firedrill-exam-result/1";

class ResultSigner {
 public:
  // The key at `path` (PEM, PKCS#8), or a new one written there owner-only
  // (0600) when no file is there. A file that holds no Ed25519 key is an
  // error, never replaced: results signed with it must stay verifiable.
  // Two processes making the key at once end with one key, both using it.
  static StatusOr<std::unique_ptr<ResultSigner>> LoadOrCreate(const std::string& path);
  ~ResultSigner();
  ResultSigner(const ResultSigner&) = delete;
  ResultSigner& operator=(const ResultSigner&) = delete;

  std::string PublicKeyPem() const;
  // The first 16 hex digits of the SHA-256 of the raw public key.
  std::string KeyId() const { return key_id_; }
  // The text of a signed result file (one line and '\n'). `result` must be
  // a JSON object whose "format" is kResultFormat. Strings that are not
  // UTF-8 are signed as they will read back (U+FFFD).
  StatusOr<std::string> SignResult(const nlohmann::json& result) const;

 private:
  explicit ResultSigner(EVP_PKEY* key);
  // The 64-byte Ed25519 signature of `bytes` ("" if OpenSSL fails).
  std::string Sign(const std::string& bytes) const;
  EVP_PKEY* key_;
  std::string key_id_;
};

// The key id of an Ed25519 public key in PEM (what a signature names).
StatusOr<std::string> PublicKeyId(const std::string& public_key_pem);

// Checks a signed result file's text against an Ed25519 public key (PEM).
// Returns the canonical text of its "result"; DataLoss saying what is wrong
// (not in the signed form, signed by another key, signature does not match:
// the result was changed after signing); `where` (the file) prefixes it.
StatusOr<std::string> VerifySignedResult(const std::string& text, const std::string& public_key_pem,
                                         const std::string& where);

}  // namespace firedrill::controller

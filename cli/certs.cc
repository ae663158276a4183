#include "cli/certs.h"

#include <arpa/inet.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "common/paths.h"

namespace firedrill::cli {

namespace {

struct Free {
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(X509_EXTENSION* p) const { X509_EXTENSION_free(p); }
  void operator()(BIGNUM* p) const { BN_free(p); }
  void operator()(X509_STORE* p) const { X509_STORE_free(p); }
  void operator()(X509_STORE_CTX* p) const { X509_STORE_CTX_free(p); }
  void operator()(GENERAL_NAMES* p) const { GENERAL_NAMES_free(p); }
};
template <typename T>
using Own = std::unique_ptr<T, Free>;

std::string BioText(BIO* b) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(b, &data);
  return n > 0 ? std::string(data, static_cast<size_t>(n)) : std::string();
}

bool IsIpAddress(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

Status AddExt(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  Own<X509_EXTENSION> ext(X509V3_EXT_nconf_nid(nullptr, &ctx, nid, value.c_str()));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1)
    return Internal(std::string("certificate extension ") + OBJ_nid2sn(nid) + "=" + value + " was refused");
  return Status::Ok();
}

// An X.509 v3 certificate for `key`, named `cn`, signed by `issuer_key`
// (`issuer` null: self-signed).
StatusOr<Own<X509>> NewCert(EVP_PKEY* key, const std::string& cn, X509* issuer, EVP_PKEY* issuer_key,
                            int days, const std::vector<std::pair<int, std::string>>& exts) {
  Own<X509> x(X509_new());
  Own<BIGNUM> serial(BN_new());
  if (!x || !serial || X509_set_version(x.get(), 2) != 1 ||
      BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      !BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(x.get())))
    return Internal("cannot make a certificate (OpenSSL)");
  X509_NAME* name = X509_get_subject_name(x.get());
  const auto text = [](const char* t) { return reinterpret_cast<const unsigned char*>(t); };
  if (!X509_gmtime_adj(X509_getm_notBefore(x.get()), -300) ||  // a little clock skew
      !X509_gmtime_adj(X509_getm_notAfter(x.get()), static_cast<long>(days) * 86400L) ||
      X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, text("firedrill"), -1, -1, 0) != 1 ||
      X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, text(cn.c_str()), -1, -1, 0) != 1 ||
      X509_set_issuer_name(x.get(), issuer ? X509_get_subject_name(issuer) : name) != 1 ||
      X509_set_pubkey(x.get(), key) != 1)
    return Internal("cannot fill in a certificate (OpenSSL)");
  // Never valid past its issuer.
  if (issuer && ASN1_TIME_compare(X509_get0_notAfter(x.get()), X509_get0_notAfter(issuer)) > 0 &&
      X509_set1_notAfter(x.get(), X509_get0_notAfter(issuer)) != 1)
    return Internal("cannot bound a certificate's validity by its CA's");
  for (const auto& [nid, value] : exts)
    FD_RETURN_IF_ERROR(AddExt(x.get(), issuer ? issuer : x.get(), nid, value));
  if (X509_sign(x.get(), issuer_key, EVP_sha256()) <= 0) return Internal("cannot sign a certificate");
  return x;
}

// A new file (never an existing one) of `mode`.
Status WriteNew(const std::string& path, const std::string& text, unsigned mode) {
  const int err = WriteNewFile(path, text, mode);
  if (err == 0) return Status::Ok();
  return FailedPrecondition(
      path + ": " + std::strerror(err) +
      (err == EEXIST ? " (certs never overwrites a file: remove it or pick another --out)" : ""));
}

StatusOr<std::string> CertPem(X509* x) {
  Own<BIO> b(BIO_new(BIO_s_mem()));
  if (!b || PEM_write_bio_X509(b.get(), x) != 1) return Internal("cannot write a certificate as PEM");
  return BioText(b.get());
}

StatusOr<std::string> KeyPem(EVP_PKEY* k) {
  Own<BIO> b(BIO_new(BIO_s_mem()));
  if (!b || PEM_write_bio_PrivateKey(b.get(), k, nullptr, nullptr, 0, nullptr, nullptr) != 1)
    return Internal("cannot write a key as PEM");
  return BioText(b.get());
}

// Writes a key and its certificate as new files.
Status WritePair(const std::string& key_path, EVP_PKEY* key, const std::string& cert_path, X509* cert) {
  auto key_pem = KeyPem(key);
  if (!key_pem.ok()) return key_pem.status();
  auto cert_pem = CertPem(cert);
  if (!cert_pem.ok()) return cert_pem.status();
  FD_RETURN_IF_ERROR(WriteNew(key_path, *key_pem, 0600));
  return WriteNew(cert_path, *cert_pem, 0644);
}

StatusOr<std::string> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

StatusOr<Own<X509>> ParseCert(const std::string& pem) {
  Own<BIO> b(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  Own<X509> x(PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr));
  if (!x) return InvalidArgument("not a PEM certificate");
  return x;
}

}  // namespace

StatusOr<CertFiles> MakeCerts(const std::string& dir, const std::vector<std::string>& hosts, int days) {
  if (hosts.empty())
    return InvalidArgument("certs: name at least one host (--host) the controller is reached by");
  if (days < 1 || days > 3650)
    return InvalidArgument("certs: --days must be 1..3650, got " + std::to_string(days));
  std::string san;
  for (const auto& h : hosts) {
    if (h.empty() || h.find_first_of(", \t\n") != std::string::npos)
      return InvalidArgument("certs: --host '" + h + "' is not a host name or address");
    san += (san.empty() ? "" : ",") + std::string(IsIpAddress(h) ? "IP:" : "DNS:") + h;
  }
  // A new folder is this user's alone; an existing one keeps its mode (the
  // keys in it are 0600 either way).
  std::string err;
  if (::access(dir.c_str(), F_OK) != 0 && !MakePrivateDir(dir, &err)) return Internal(err);
  CertFiles f{dir + "/ca.pem", dir + "/ca.key", dir + "/server.pem", dir + "/server.key"};
  for (const std::string& p : {f.server_cert, f.server_key})
    if (::access(p.c_str(), F_OK) == 0)
      return FailedPrecondition(p +
                                " exists: certs never overwrites a file (remove the server pair, or pick "
                                "another --out)");

  // The CA: the one already there, else a new one.
  Own<EVP_PKEY> ca_key;
  Own<X509> ca;
  if (::access(f.ca_cert.c_str(), F_OK) == 0 || ::access(f.ca_key.c_str(), F_OK) == 0) {
    auto cert_pem = ReadAll(f.ca_cert);
    auto key_pem = ReadAll(f.ca_key);
    if (!cert_pem.ok() || !key_pem.ok())
      return FailedPrecondition("certs: " + dir + " has one of ca.pem and ca.key without the other");
    auto parsed = ParseCert(*cert_pem);
    if (!parsed.ok()) return InvalidArgument(f.ca_cert + ": " + parsed.status().message());
    ca = std::move(parsed).value();
    Own<BIO> b(BIO_new_mem_buf(key_pem->data(), static_cast<int>(key_pem->size())));
    ca_key.reset(PEM_read_bio_PrivateKey(b.get(), nullptr, nullptr, nullptr));
    if (!ca_key || X509_check_private_key(ca.get(), ca_key.get()) != 1)
      return InvalidArgument(f.ca_key + " is not the key of " + f.ca_cert);
    if (X509_check_ca(ca.get()) <= 0) return InvalidArgument(f.ca_cert + " is not a CA certificate");
    int left_days = 0, left_s = 0;
    // Made with the same --days moments ago is fine (the pair ends with the
    // CA); a day or more short is not what was asked for.
    if (ASN1_TIME_diff(&left_days, &left_s, nullptr, X509_get0_notAfter(ca.get())) != 1 ||
        left_days < days - 1)
      return FailedPrecondition(f.ca_cert + " expires in fewer than " + std::to_string(days) +
                                " days: ask for fewer --days, or make a new CA in another --out");
  } else {
    ca_key.reset(EVP_EC_gen("P-256"));
    if (!ca_key) return Internal("cannot make a P-256 key (OpenSSL)");
    auto made = NewCert(ca_key.get(), "firedrill CA", nullptr, ca_key.get(), days,
                        {{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
                         {NID_key_usage, "critical,keyCertSign,cRLSign"},
                         {NID_subject_key_identifier, "hash"}});
    if (!made.ok()) return made.status();
    ca = std::move(made).value();
    FD_RETURN_IF_ERROR(WritePair(f.ca_key, ca_key.get(), f.ca_cert, ca.get()));
  }

  Own<EVP_PKEY> key(EVP_EC_gen("P-256"));
  if (!key) return Internal("cannot make a P-256 key (OpenSSL)");
  // The names are in the SANs; an ECDSA key signs, it enciphers nothing.
  auto server = NewCert(key.get(), "firedrill controller", ca.get(), ca_key.get(), days,
                        {{NID_basic_constraints, "critical,CA:FALSE"},
                         {NID_key_usage, "critical,digitalSignature"},
                         {NID_ext_key_usage, "serverAuth"},
                         {NID_subject_alt_name, san},
                         {NID_authority_key_identifier, "keyid"}});
  if (!server.ok()) return server.status();
  FD_RETURN_IF_ERROR(WritePair(f.server_key, key.get(), f.server_cert, server->get()));
  return f;
}

StatusOr<std::vector<std::string>> CertNames(const std::string& cert_pem) {
  auto x = ParseCert(cert_pem);
  if (!x.ok()) return x.status();
  std::vector<std::string> out;
  Own<GENERAL_NAMES> names(
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(x->get(), NID_subject_alt_name, nullptr, nullptr)));
  for (int i = 0; names && i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names.get(), i);
    if (n->type == GEN_DNS) {
      out.push_back("DNS:" + std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(n->d.dNSName)),
                                         ASN1_STRING_length(n->d.dNSName)));
    } else if (n->type == GEN_IPADD) {
      const int len = ASN1_STRING_length(n->d.iPAddress);
      char text[INET6_ADDRSTRLEN] = {0};
      if ((len != 4 && len != 16) || !inet_ntop(len == 4 ? AF_INET : AF_INET6,
                                                ASN1_STRING_get0_data(n->d.iPAddress), text, sizeof(text)))
        return InvalidArgument("a certificate's IP address name has " + std::to_string(len) + " bytes");
      out.push_back("IP:" + std::string(text));
    }
  }
  return out;
}

StatusOr<bool> CertSignedBy(const std::string& cert_pem, const std::string& ca_pem) {
  auto x = ParseCert(cert_pem);
  if (!x.ok()) return x.status();
  auto ca = ParseCert(ca_pem);
  if (!ca.ok()) return ca.status();
  Own<X509_STORE> store(X509_STORE_new());
  Own<X509_STORE_CTX> ctx(X509_STORE_CTX_new());
  if (!store || !ctx || X509_STORE_add_cert(store.get(), ca->get()) != 1 ||
      X509_STORE_CTX_init(ctx.get(), store.get(), x->get(), nullptr) != 1)
    return Internal("cannot check a certificate chain (OpenSSL)");
  X509_STORE_CTX_set_purpose(ctx.get(), X509_PURPOSE_SSL_SERVER);
  return X509_verify_cert(ctx.get()) == 1;
}

}  // namespace firedrill::cli

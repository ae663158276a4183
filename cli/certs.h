// `firedrill certs`: a private CA and a server certificate signed by it, for
// TLS on the controller's public listener in tests and small setups (a site
// with its own PKI uses its own certificates: the controller takes any PEM
// pair). Keys are ECDSA P-256, certificates X.509 v3 signed with SHA-256.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace firedrill::cli {

struct CertFiles {
  std::string ca_cert;      // give it to clients: --tls-ca
  std::string ca_key;       // keep it: it signs more server certificates
  std::string server_cert;  // the controller's --tls-cert
  std::string server_key;   // the controller's --tls-key
};

// Writes ca.pem, ca.key, server.pem and server.key into `dir` (made 0700 if
// missing; keys 0600). The server certificate names every entry of `hosts`
// (a DNS name, or an IPv4/IPv6 address) and is valid for `days` days. When
// `dir` already holds ca.pem and ca.key, that CA signs the new server pair,
// so clients that trust it need nothing new. Never overwrites a server pair.
StatusOr<CertFiles> MakeCerts(const std::string& dir, const std::vector<std::string>& hosts, int days);

// The subject alternative names of a PEM certificate, as "DNS:x" / "IP:y";
// and whether `ca_pem` signed it (for `certs` to print and tests to check).
StatusOr<std::vector<std::string>> CertNames(const std::string& cert_pem);
StatusOr<bool> CertSignedBy(const std::string& cert_pem, const std::string& ca_pem);

}  // namespace firedrill::cli

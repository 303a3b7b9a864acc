//! Certificates for TLS tests, generated on the spot with rcgen: nothing is checked in and
//! nothing reaches outside the test's temporary directory.

use std::path::{Path, PathBuf};

/// Writes `text` to `path` readable by the owner only (as a private key should be).
pub fn write_private(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// A CA, a server certificate for 127.0.0.1 and localhost, and a client certificate, all
/// signed by the CA, as PEM files in `dir`.
pub struct Pki {
    /// The CA certificate (PEM).
    pub ca: PathBuf,
    /// The server certificate for 127.0.0.1 and localhost.
    pub server_cert: PathBuf,
    /// Its private key.
    pub server_key: PathBuf,
    /// A client certificate (for mutual TLS).
    pub client_cert: PathBuf,
    /// Its private key.
    pub client_key: PathBuf,
}

/// Generates the [`Pki`] into `dir` (created when missing).
pub fn pki(dir: &Path) -> Pki {
    std::fs::create_dir_all(dir).unwrap();
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "dlq test CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf = |names: Vec<String>, usage: ExtendedKeyUsagePurpose, name: &str| {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![usage];
        let cert = params.signed_by(&key, &issuer).unwrap();
        let (cert_path, key_path) = (
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}-key.pem")),
        );
        std::fs::write(&cert_path, cert.pem()).unwrap();
        write_private(&key_path, &key.serialize_pem());
        (cert_path, key_path)
    };
    let (server_cert, server_key) = leaf(
        vec!["127.0.0.1".into(), "localhost".into()],
        ExtendedKeyUsagePurpose::ServerAuth,
        "server",
    );
    let (client_cert, client_key) = leaf(
        vec!["dlq-client".into()],
        ExtendedKeyUsagePurpose::ClientAuth,
        "client",
    );
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, ca_cert.pem()).unwrap();
    Pki {
        ca,
        server_cert,
        server_key,
        client_cert,
        client_key,
    }
}

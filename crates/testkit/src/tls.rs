//! Certificates for RPC-over-TLS tests, made by the test (rcgen): a CA,
//! a server certificate for `localhost` and 127.0.0.1 signed by it, a
//! client certificate signed by it, and a client certificate signed by
//! another CA (one the server must refuse). Written as PEM files into a
//! [`TempDir`].

use std::path::PathBuf;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};

use crate::TempDir;

/// PEM files of one test PKI, removed with the directory.
pub struct TestPki {
    /// Holds the files.
    pub dir: TempDir,
    /// The CA certificate (server and clients trust it).
    pub ca: PathBuf,
    /// The server's certificate (`localhost`, 127.0.0.1, ::1).
    pub server_cert: PathBuf,
    /// The server's key.
    pub server_key: PathBuf,
    /// A client certificate signed by the CA.
    pub client_cert: PathBuf,
    /// Its key.
    pub client_key: PathBuf,
    /// A client certificate signed by another CA.
    pub rogue_cert: PathBuf,
    /// Its key.
    pub rogue_key: PathBuf,
}

fn ca(name: &str) -> (CertificateParams, KeyPair, String) {
    let key = KeyPair::generate().expect("CA key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let pem = params.self_signed(&key).expect("CA certificate").pem();
    (params, key, pem)
}

fn leaf(
    issuer: &Issuer<'_, KeyPair>,
    name: &str,
    sans: Vec<String>,
    usage: ExtendedKeyUsagePurpose,
) -> (String, String) {
    let key = KeyPair::generate().expect("leaf key");
    let mut params = CertificateParams::new(sans).expect("leaf params");
    params.distinguished_name.push(DnType::CommonName, name);
    params.extended_key_usages = vec![usage];
    let cert = params.signed_by(&key, issuer).expect("leaf certificate");
    (cert.pem(), key.serialize_pem())
}

impl TestPki {
    /// Makes the certificates and writes them under a new temporary
    /// directory tagged `tag`.
    pub fn new(tag: &str) -> Self {
        let dir = TempDir::new(tag);
        let write = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).expect("write PEM");
            p
        };
        let (ca_params, ca_key, ca_pem) = ca("nfsrdma test CA");
        let issuer = Issuer::new(ca_params, ca_key);
        let sans = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
        let (srv, srv_key) = leaf(&issuer, "server", sans, ExtendedKeyUsagePurpose::ServerAuth);
        let (cli, cli_key) = leaf(
            &issuer,
            "client",
            vec!["client.test".into()],
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        let (rogue_params, rogue_ca_key, _) = ca("rogue CA");
        let rogue_issuer = Issuer::new(rogue_params, rogue_ca_key);
        let (rogue, rogue_key) = leaf(
            &rogue_issuer,
            "client",
            vec!["client.test".into()],
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        Self {
            ca: write("ca.pem", &ca_pem),
            server_cert: write("server.pem", &srv),
            server_key: write("server.key", &srv_key),
            client_cert: write("client.pem", &cli),
            client_key: write("client.key", &cli_key),
            rogue_cert: write("rogue.pem", &rogue),
            rogue_key: write("rogue.key", &rogue_key),
            dir,
        }
    }
}

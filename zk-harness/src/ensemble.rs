//! A ZooKeeper ensemble (quorum of servers) on loopback ports, for tests that
//! kill servers — the leader among them — while clients keep working.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::{
    check_installation, four_letter_word, free_port, jvm_command, GuardedIo, GuardedProcess,
    StartError, MAX_SESSION_TIMEOUT_MS, MIN_SESSION_TIMEOUT_MS, START_TIMEOUT, TICK_TIME_MS,
};

/// One server of a [`ZkEnsemble`].
#[derive(Debug)]
struct Member {
    /// `myid`, from 1.
    id: usize,
    client_port: u16,
    dir: PathBuf,
    running: Mutex<Option<GuardedProcess>>,
}

impl Member {
    fn lock(&self) -> MutexGuard<'_, Option<GuardedProcess>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("zookeeper.log")
    }

    fn spawn(&self) -> Result<(), StartError> {
        let mut running = self.lock();
        if running.is_some() {
            return Ok(());
        }
        let command = jvm_command(&self.dir.join("zoo.cfg"), &self.dir);
        let p = GuardedProcess::spawn(&command, &self.dir, &self.log_path(), GuardedIo::Log, false)
            .map_err(|e| StartError::new(format!("cannot run sh to start ZooKeeper: {e}")))?;
        *running = Some(p);
        Ok(())
    }

    /// `leader`, `follower`, or `None` when the server does not serve.
    fn mode(&self) -> Option<String> {
        let answer = four_letter_word(self.client_port, b"srvr")?;
        answer
            .lines()
            .find_map(|l| l.strip_prefix("Mode: "))
            .map(|m| m.trim().to_owned())
    }
}

/// A quorum of ZooKeeper servers on loopback ports, each with its own data
/// folder under one temporary folder (removed on drop; the JVMs are killed).
///
/// Clients connect to [`connect_string`](Self::connect_string), which names
/// every server; killing one (the leader with
/// [`kill_leader`](Self::kill_leader)) makes the others elect a new leader
/// while sessions survive (their clients reconnect to another server within
/// the session timeout).
#[derive(Debug)]
pub struct ZkEnsemble {
    root: TempDir,
    members: Vec<Member>,
}

impl ZkEnsemble {
    /// Starts `servers` servers (3 for a quorum that survives one loss) and
    /// waits until they serve with one leader.
    ///
    /// # Panics
    ///
    /// With the reason and the servers' log tails when they cannot start.
    pub fn start(servers: usize) -> ZkEnsemble {
        match Self::try_start(servers) {
            Ok(e) => e,
            Err(e) => panic!("{e}"),
        }
    }

    /// As [`start`](Self::start), returning the failure.
    ///
    /// # Errors
    ///
    /// [`StartError`] when Java or ZooKeeper is missing, or the quorum does not
    /// form within [`START_TIMEOUT`].
    pub fn try_start(servers: usize) -> Result<ZkEnsemble, StartError> {
        check_installation()?;
        let root = tempfile::Builder::new()
            .prefix("bkswitch-zk-ensemble-")
            .tempdir()
            .map_err(|e| StartError::new(format!("cannot create a temporary folder: {e}")))?;
        let mut ports = Vec::new();
        for _ in 0..servers {
            ports.push((free_port()?, free_port()?, free_port()?));
        }
        let peers: String = ports
            .iter()
            .enumerate()
            .map(|(i, (_, quorum, election))| {
                format!("server.{}=127.0.0.1:{quorum}:{election}\n", i + 1)
            })
            .collect();
        let mut members = Vec::new();
        for (i, (client, ..)) in ports.iter().enumerate() {
            let dir = root.path().join(format!("server-{}", i + 1));
            let data = dir.join("data");
            let io = |e: std::io::Error| {
                StartError::new(format!("cannot prepare {}: {e}", dir.display()))
            };
            fs::create_dir_all(&data).map_err(io)?;
            fs::write(data.join("myid"), format!("{}\n", i + 1)).map_err(io)?;
            fs::write(dir.join("zoo.cfg"), config(&data, *client, &peers)).map_err(io)?;
            members.push(Member {
                id: i + 1,
                client_port: *client,
                dir,
                running: Mutex::new(None),
            });
        }
        let ensemble = ZkEnsemble { root, members };
        for m in &ensemble.members {
            m.spawn()?;
        }
        ensemble.wait_for_quorum(START_TIMEOUT)?;
        Ok(ensemble)
    }

    /// `127.0.0.1:P1,127.0.0.1:P2,…`, every server.
    pub fn connect_string(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The ensemble's folder (one `server-N` folder per server).
    pub fn dir(&self) -> &Path {
        self.root.path()
    }

    /// The index (from 0) of the server that leads now, if one does.
    pub fn leader(&self) -> Option<usize> {
        self.members
            .iter()
            .position(|m| m.lock().is_some() && m.mode().as_deref() == Some("leader"))
    }

    /// Kills the leading server (SIGKILL) and returns its index.
    ///
    /// # Panics
    ///
    /// When no server leads.
    pub fn kill_leader(&self) -> usize {
        let i = self
            .leader()
            .unwrap_or_else(|| panic!("no ZooKeeper server leads:\n{}", self.log_tails(20)));
        self.kill(i);
        i
    }

    /// Kills server `i` (SIGKILL); its data is kept.
    pub fn kill(&self, i: usize) {
        if let Some(p) = self.members[i].lock().take() {
            p.kill();
        }
    }

    /// Starts server `i` again with its data and waits until the quorum
    /// serves with it.
    ///
    /// # Panics
    ///
    /// When it does not rejoin within [`START_TIMEOUT`].
    pub fn start_again(&self, i: usize) {
        if let Err(e) = self.members[i]
            .spawn()
            .and_then(|()| self.wait_for_quorum(START_TIMEOUT))
        {
            panic!("{e}");
        }
    }

    /// Waits until every running server serves (as leader or follower) and
    /// exactly one leads.
    ///
    /// # Errors
    ///
    /// [`StartError`] with the log tails after `timeout`.
    pub fn wait_for_quorum(&self, timeout: Duration) -> Result<(), StartError> {
        let deadline = Instant::now() + timeout;
        loop {
            let modes: Vec<Option<String>> = self
                .members
                .iter()
                .filter(|m| m.lock().is_some())
                .map(Member::mode)
                .collect();
            let leaders = modes
                .iter()
                .filter(|m| m.as_deref() == Some("leader"))
                .count();
            if leaders == 1 && modes.iter().all(Option::is_some) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(StartError::new(format!(
                    "the ZooKeeper ensemble did not form a quorum within {timeout:?} \
                     (modes {modes:?}).\nServer logs:\n{}",
                    self.log_tails(20)
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The last `lines` lines of every server's log.
    pub fn log_tails(&self, lines: usize) -> String {
        self.members
            .iter()
            .map(|m| {
                let text = fs::read_to_string(m.log_path()).unwrap_or_default();
                let all: Vec<&str> = text.lines().collect();
                format!(
                    "--- server {} ---\n{}",
                    m.id,
                    all[all.len().saturating_sub(lines)..].join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for ZkEnsemble {
    fn drop(&mut self) {
        for m in &self.members {
            if let Some(p) = m.lock().take() {
                p.close();
            }
        }
    }
}

/// One server's `zoo.cfg`: the standalone settings of [`crate::ZkServer`]
/// plus the quorum (`initLimit`/`syncLimit` in ticks of 200 ms).
fn config(data: &Path, client_port: u16, peers: &str) -> String {
    format!(
        "dataDir={data}\n\
         clientPort={client_port}\n\
         clientPortAddress=127.0.0.1\n\
         admin.enableServer=false\n\
         4lw.commands.whitelist=ruok,srvr\n\
         tickTime={TICK_TIME_MS}\n\
         initLimit=50\n\
         syncLimit=10\n\
         minSessionTimeout={MIN_SESSION_TIMEOUT_MS}\n\
         maxSessionTimeout={MAX_SESSION_TIMEOUT_MS}\n\
         maxClientCnxns=0\n\
         forceSync=no\n\
         preAllocSize=1024\n\
         standaloneEnabled=false\n\
         reconfigEnabled=false\n\
         {peers}",
        data = data.display(),
    )
}

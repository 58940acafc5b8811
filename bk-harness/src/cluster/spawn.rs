//! Starting bookies: their ports, their processes, waiting for their
//! registration, and finding the program under a guard's wrapper.

use super::setup::free_port;
use super::*;

impl BkCluster {
    pub(super) fn registered(&self, id: &str) -> Result<bool, StartError> {
        let root = &self.ledgers_root;
        let check = |path: String| {
            self.zk
                .exists(&path)
                .map_err(|e| StartError::new(format!("cannot read {path}: {e}")))
        };
        Ok(check(format!("{root}/available/{id}"))?
            || check(format!("{root}/available/readonly/{id}"))?)
    }

    pub(super) fn wait_registration(&self, i: usize, registered: bool, timeout: Duration) -> bool {
        let id = self.bookie_id(i);
        let deadline = Instant::now() + timeout;
        loop {
            if matches!(self.registered(&id), Ok(r) if r == registered) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(POLL);
        }
    }

    /// Prepares folder and port of a new bookie and launches it; returns its
    /// index.
    pub(super) fn launch_new(&self, extra: Vec<(String, String)>) -> Result<usize, StartError> {
        let dir = tempfile::Builder::new()
            .prefix("bkswitch-bookie-")
            .tempdir()
            .map_err(|e| StartError::new(format!("cannot create a temporary folder: {e}")))?
            .keep();
        let mut bookies = self.lock();
        let index = bookies.len();
        let mut bookie = Bookie {
            port: 0,
            id: String::new(),
            dir,
            extra,
            process: None,
            attempts: 0,
        };
        let launched = self
            .assign_port(&mut bookie)
            .and_then(|()| self.spawn(&mut bookie));
        bookies.push(bookie);
        launched.map(|()| index)
    }

    /// Picks a port (unless configured) and the id, and (re)creates empty
    /// folders.
    pub(super) fn assign_port(&self, bookie: &mut Bookie) -> Result<(), StartError> {
        let configured = |key: &str| {
            bookie
                .extra
                .iter()
                .chain(self.settings.conf.iter())
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };
        bookie.port = match configured("bookiePort") {
            Some(port) => port
                .parse()
                .map_err(|_| StartError::new(format!("bookiePort={port} is not a port")))?,
            None => free_port()?,
        };
        bookie.id = configured("bookieId").unwrap_or_else(|| format!("127.0.0.1:{}", bookie.port));
        // `tmp`: the JVM's temporary folder (RocksDB extracts its 13 MB native
        // library there at every start, and a killed JVM never deletes it).
        for sub in ["journal", "ledgers", "tmp"] {
            let path = bookie.dir.join(sub);
            if path.exists() {
                fs::remove_dir_all(&path).map_err(|e| {
                    StartError::new(format!("cannot clear {}: {e}", path.display()))
                })?;
            }
        }
        let _ = fs::remove_file(bookie.log_path());
        let log4j = bookie.dir.join("log4j2.properties");
        fs::write(&log4j, &self.settings.log4j)
            .map_err(|e| StartError::new(format!("cannot write {}: {e}", log4j.display())))?;
        // `tmp`: the JVM's temporary folder (RocksDB extracts its 13 MB native
        // library there at every start, and a killed JVM never deletes it).
        for sub in ["journal", "ledgers", "tmp"] {
            let path = bookie.dir.join(sub);
            fs::create_dir_all(&path)
                .map_err(|e| StartError::new(format!("cannot create {}: {e}", path.display())))?;
        }
        Ok(())
    }

    /// Writes the bookie's configuration and starts its JVM.
    pub(super) fn spawn(&self, bookie: &mut Bookie) -> Result<(), StartError> {
        let mut conf: Vec<(String, String)> = vec![
            ("metadataServiceUri".into(), self.metadata_service_uri()),
            ("bookiePort".into(), bookie.port.to_string()),
            ("advertisedAddress".into(), "127.0.0.1".into()),
            ("allowLoopback".into(), "true".into()),
            // Listen on the loopback interface only, never on every interface.
            ("listeningInterface".into(), "lo".into()),
            (
                "journalDirectories".into(),
                bookie.dir.join("journal").display().to_string(),
            ),
            (
                "ledgerDirectories".into(),
                bookie.dir.join("ledgers").display().to_string(),
            ),
            ("httpServerEnabled".into(), "false".into()),
            ("zkTimeout".into(), ZK_TIMEOUT_MS.to_string()),
            ("journalSyncData".into(), "false".into()),
            ("gcWaitTime".into(), "5000".into()),
            ("diskUsageThreshold".into(), "0.99".into()),
            ("diskUsageWarnThreshold".into(), "0.98".into()),
        ];
        for (key, value) in self.settings.conf.iter().chain(bookie.extra.iter()) {
            match conf.iter_mut().find(|(k, _)| k == key) {
                Some(entry) => entry.1 = value.clone(),
                None => conf.push((key.clone(), value.clone())),
            }
        }
        let text: String = conf
            .iter()
            .map(|(k, v)| format!("{k}={v}\n"))
            .collect::<String>();
        fs::write(bookie.conf_path(), text).map_err(|e| {
            StartError::new(format!(
                "cannot write {}: {e}",
                bookie.conf_path().display()
            ))
        })?;

        let s = &self.settings;
        let mut command = Command::new(&s.installation.java);
        command
            .arg(format!("-Xms{}m", s.max_heap_mb.min(64)))
            .arg(format!("-Xmx{}m", s.max_heap_mb))
            .arg(format!(
                "-XX:MaxDirectMemorySize={}m",
                s.max_direct_memory_mb
            ))
            .args(["-XX:+UseSerialGC", "-XX:-UsePerfData"])
            .args(JAVA_17_FLAGS)
            .arg(format!(
                "-Djava.io.tmpdir={}",
                bookie.dir.join("tmp").display()
            ))
            .arg(format!(
                "-Dlog4j2.configurationFile={}",
                bookie.dir.join("log4j2.properties").display()
            ))
            .args(&s.jvm_args)
            .arg("-cp")
            .arg(classpath(&s.installation.lib))
            .arg(BOOKIE_MAIN)
            .arg("-c")
            .arg(bookie.conf_path())
            .current_dir(&bookie.dir);
        let process = GuardedProcess::spawn(
            &command,
            &bookie.dir,
            &bookie.log_path(),
            GuardedIo::Log,
            true,
        )
        .map_err(|e| StartError::new(format!("cannot run sh to start a bookie: {e}")))?;
        bookie.process = Some(process);
        Ok(())
    }

    /// Waits until the given bookies have registered, moving a bookie whose
    /// port was taken meanwhile to another port (first starts only).
    pub(super) fn wait_started(&self, indices: &[usize]) -> Result<(), StartError> {
        let deadline = Instant::now() + self.settings.start_timeout;
        let mut pending: Vec<usize> = indices.to_vec();
        loop {
            let mut still = Vec::new();
            for &i in &pending {
                let id = self.bookie_id(i);
                if !self.registered(&id)? {
                    still.push(i);
                }
            }
            pending = still;
            if pending.is_empty() {
                return Ok(());
            }
            for &i in &pending {
                self.check_alive(i)?;
            }
            if Instant::now() >= deadline {
                let logs: Vec<String> = pending
                    .iter()
                    .map(|&i| {
                        format!(
                            "bookie {i} ({}), log {}:\n{}",
                            self.bookie_id(i),
                            self.log_path(i).display(),
                            log_excerpt(&self.log_path(i), 40)
                        )
                    })
                    .collect();
                return Err(StartError::new(format!(
                    "{} bookie(s) did not register under {}/available within {:?} \
                     (metadata service {}).\n{}",
                    pending.len(),
                    self.ledgers_root,
                    self.settings.start_timeout,
                    self.metadata_service_uri(),
                    logs.join("\n")
                )));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Fails when bookie `i`'s JVM exited, unless it only lost its port race:
    /// then it gets a new port and folders and is launched again.
    pub(super) fn check_alive(&self, i: usize) -> Result<(), StartError> {
        self.with(i, |b| {
            let alive = b.process.as_mut().is_some_and(|p| p.is_running());
            if alive {
                return Ok(());
            }
            let status = b.process.as_mut().and_then(|p| p.try_exit_status());
            let log = log_excerpt(&b.log_path(), 40);
            b.attempts += 1;
            if log.contains("Address already in use") && b.attempts < PORT_ATTEMPTS {
                b.process = None;
                self.assign_port(b)?;
                return self.spawn(b);
            }
            Err(StartError::new(format!(
                "bookie {i} ({}) exited during start ({}) under {} (metadata service {}); \
                 log {}:\n{log}",
                b.id,
                status.map_or_else(|| "no status".to_owned(), |s| s.to_string()),
                self.ledgers_root,
                self.metadata_service_uri(),
                b.log_path().display(),
            )))
        })
    }
}

/// The program under a guard's wrapper: the child of `parent` that is not a
/// shell (the wrapper's watcher is one).
pub(super) fn child_of(parent: u32) -> Option<u32> {
    let not_shell = |pid: &u32| {
        std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() != "sh")
    };
    if let Ok(children) = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
    {
        return children
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .find(not_shell);
    }
    // Without CONFIG_PROC_CHILDREN: the processes whose parent it is.
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let ppid: u32 = stat
            .rsplit(')')
            .next()?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        (ppid == parent && not_shell(&pid)).then_some(pid)
    })
}

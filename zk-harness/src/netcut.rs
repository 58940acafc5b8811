//! Cutting processes off loopback ports without a proxy in between: for links
//! a [`FaultProxy`](crate::FaultProxy) cannot stand in, such as a client's
//! connections to BookKeeper bookies (a client connects to the address each
//! bookie advertises in ZooKeeper, so no proxy address can be slipped in).
//!
//! A [`NetCut`] is a cgroup (v2) of its own and a connection mark. Processes
//! started through [`NetCut::command`] join the cgroup before they `exec`, so
//! every socket they open belongs to it. One `iptables` rule in the `mangle`
//! table marks every connection such a socket sends on; [`NetCut::cut`] adds a
//! rule in the `filter` table that drops (a blackhole) or resets (a peer that
//! refuses) the packets of marked connections to or from the given ports, in
//! both directions; [`NetCut::heal`] removes it. Other processes on the same
//! ports are not touched, so a test cuts one `serve` process off its bookies
//! while the checker and the other processes still reach them.
//!
//! Needs root, `iptables` (Debian's package; either backend) and a writable
//! cgroup v2 hierarchy (the unified mount of a hybrid layout will do).
//! [`NetCut::new`] says which is missing instead of failing later. Dropping a
//! `NetCut` heals it and removes its rules and its cgroup.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use crate::LinkMode;

/// The comment on every rule of this module (for cleaning up by hand:
/// `iptables-save | grep bkswitch-netcut`).
const COMMENT: &str = "bkswitch-netcut";

/// At most this many ports in one `multiport` match.
const PORTS_PER_RULE: usize = 15;

/// A cgroup whose processes can be cut off a set of loopback ports, and
/// healed, while they and their peers run: processes started through
/// [`NetCut::command`] join it before they `exec`; an `iptables` rule marks
/// every connection they open; [`NetCut::cut`] drops or resets the marked
/// connections' packets to or from the given ports, both directions.
/// Needs root, `iptables` and a writable cgroup v2 hierarchy
/// ([`NetCut::available`] says which is missing).
#[derive(Debug)]
pub struct NetCut {
    /// The cgroup's folder.
    dir: PathBuf,
    /// Its path below the cgroup v2 root, as `-m cgroup --path` takes it.
    rel: String,
    /// The connection mark of its sockets' connections.
    mark: u32,
    /// The `filter` rules of the cut now in force.
    cut: Mutex<Vec<Vec<String>>>,
}

impl NetCut {
    /// Checks that cuts can be made here: root, `iptables` and a writable
    /// cgroup v2 hierarchy. The error says what is missing.
    pub fn available() -> Result<(), String> {
        cgroup2_root()?;
        iptables(&["-w", "-L", "OUTPUT", "-n"])
            .map_err(|e| format!("iptables does not answer ({e}); install Debian's `iptables`"))?;
        Ok(())
    }

    /// A new cgroup named after `name` (unique in this process) and its
    /// marking rule.
    pub fn new(name: &str) -> Result<NetCut, String> {
        static NEXT: AtomicU32 = AtomicU32::new(1);
        static SWEPT: std::sync::Once = std::sync::Once::new();
        let root = cgroup2_root()?;
        SWEPT.call_once(|| sweep_stale(&root));
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let rel = format!("bkswitch-netcut-{pid}-{n}-{name}");
        let dir = root.join(&rel);
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create the cgroup {}: {e}", dir.display()))?;
        // Marks in 0x5b000000..: the low 24 bits from the process and the
        // counter, so parallel test processes do not share one.
        let mark = 0x5b00_0000 | ((pid & 0xffff) << 8) | (n & 0xff);
        let cut = NetCut {
            dir,
            rel,
            mark,
            cut: Mutex::new(Vec::new()),
        };
        iptables(&cut.mark_rule("-A")).map_err(|e| format!("cannot add the marking rule: {e}"))?;
        Ok(cut)
    }

    /// The cgroup's `cgroup.procs` file (a process written there joins it).
    pub fn procs_file(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// A command that runs `program` inside the cgroup: a shell joins it
    /// and `exec`s the program, so the child's pid is the program's and no
    /// socket is opened outside the cgroup.
    pub fn command(&self, program: impl AsRef<Path>) -> Command {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(r#"echo $$ > "$0" && exec "$@""#)
            .arg(self.procs_file())
            .arg(program.as_ref());
        cmd
    }

    /// Cuts the cgroup's processes off `ports` (loopback, either end of a
    /// connection): [`LinkMode::Blackhole`] drops every packet both ways,
    /// [`LinkMode::Reset`] answers each with a TCP reset (new connections are
    /// refused), [`LinkMode::Forward`] heals. Replaces the cut in force.
    pub fn cut(&self, ports: &[u16], mode: LinkMode) -> io::Result<()> {
        self.heal()?;
        let target: &[&str] = match mode {
            LinkMode::Forward => return Ok(()),
            LinkMode::Blackhole => &["DROP"],
            LinkMode::Reset => &["REJECT", "--reject-with", "tcp-reset"],
        };
        let mut rules = Vec::new();
        for chunk in ports.chunks(PORTS_PER_RULE) {
            let list: Vec<String> = chunk.iter().map(u16::to_string).collect();
            let mut rule: Vec<String> = [
                "-p",
                "tcp",
                "-m",
                "connmark",
                "--mark",
                &format!("{:#x}", self.mark),
                "-m",
                "multiport",
                "--ports",
                &list.join(","),
                "-m",
                "comment",
                "--comment",
                COMMENT,
                "-j",
            ]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
            rule.extend(target.iter().map(|s| (*s).to_owned()));
            rules.push(rule);
        }
        let mut held = self.cut.lock().unwrap_or_else(|e| e.into_inner());
        for rule in rules {
            let mut args = vec!["-w".to_owned(), "-I".to_owned(), "OUTPUT".to_owned()];
            args.extend(rule.iter().cloned());
            iptables(&args)?;
            held.push(rule);
        }
        Ok(())
    }

    /// Removes the cut in force, if any.
    pub fn heal(&self) -> io::Result<()> {
        let mut held = self.cut.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(rule) = held.pop() {
            let mut args = vec!["-w".to_owned(), "-D".to_owned(), "OUTPUT".to_owned()];
            args.extend(rule);
            iptables(&args)?;
        }
        Ok(())
    }

    /// Whether a cut is in force.
    pub fn is_cut(&self) -> bool {
        !self
            .cut
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// The `mangle` rule that marks the cgroup's connections (`-A` adds it,
    /// `-D` removes it).
    fn mark_rule(&self, op: &str) -> Vec<String> {
        [
            "-w",
            "-t",
            "mangle",
            op,
            "OUTPUT",
            "-m",
            "cgroup",
            "--path",
            &self.rel,
            "-m",
            "comment",
            "--comment",
            COMMENT,
            "-j",
            "CONNMARK",
            "--set-mark",
            &format!("{:#x}", self.mark),
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
    }
}

impl Drop for NetCut {
    fn drop(&mut self) {
        let _ = self.heal();
        let _ = iptables(&self.mark_rule("-D"));
        // A cgroup with processes left cannot be removed; they are moved to
        // the root first (they may outlive the test by a moment).
        if let Ok(procs) = std::fs::read_to_string(self.procs_file()) {
            if let Some(root) = self.dir.parent() {
                for pid in procs.split_whitespace() {
                    let _ = std::fs::write(root.join("cgroup.procs"), pid);
                }
            }
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Removes what test processes that were killed (no destructor ran) left:
/// the rules and cgroups of every `NetCut` whose process is gone. A cut left
/// in force could otherwise hit a later process given the same mark.
fn sweep_stale(root: &Path) {
    let alive = |rel: &str| {
        rel.strip_prefix("bkswitch-netcut-")
            .and_then(|r| r.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
            .is_none_or(|pid| Path::new(&format!("/proc/{pid}")).exists())
    };
    let Ok(out) = Command::new("iptables-save").output() else {
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut table = "filter";
    let mut dead_marks = Vec::new();
    let mut deletes: Vec<(String, Vec<String>)> = Vec::new();
    for line in text.lines() {
        if let Some(t) = line.strip_prefix('*') {
            table = if t == "mangle" { "mangle" } else { "filter" };
            continue;
        }
        if !line.contains(COMMENT) || !line.starts_with("-A OUTPUT") {
            continue;
        }
        let words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        let after = |flag: &str| {
            words
                .iter()
                .position(|w| w == flag)
                .and_then(|i| words.get(i + 1).cloned())
        };
        if table == "mangle" {
            let Some(path) = after("--path") else {
                continue;
            };
            if alive(&path) {
                continue;
            }
            if let Some(mark) = after("--set-xmark") {
                dead_marks.push(mark.split('/').next().unwrap_or_default().to_owned());
            }
            let _ = std::fs::remove_dir(root.join(&path));
        }
        deletes.push((table.to_owned(), words));
    }
    for (table, mut words) in deletes {
        if table == "filter" {
            let mark = words
                .iter()
                .position(|w| w == "--mark")
                .and_then(|i| words.get(i + 1))
                .map(|m| m.split('/').next().unwrap_or_default().to_owned());
            if !mark.is_some_and(|m| dead_marks.contains(&m)) {
                continue;
            }
        }
        words[0] = "-D".to_owned();
        let mut args = vec!["-w".to_owned(), "-t".to_owned(), table];
        args.extend(words);
        let _ = iptables(&args);
    }
    if let Ok(dirs) = std::fs::read_dir(root) {
        for d in dirs.flatten() {
            let name = d.file_name().to_string_lossy().into_owned();
            if name.starts_with("bkswitch-netcut-") && !alive(&name) {
                let _ = std::fs::remove_dir(d.path());
            }
        }
    }
}

/// The mount point of the cgroup v2 hierarchy, checked writable.
fn cgroup2_root() -> Result<PathBuf, String> {
    let mounts = std::fs::read_to_string("/proc/mounts")
        .map_err(|e| format!("cannot read /proc/mounts: {e}"))?;
    let root = mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, at, kind) = (f.next()?, f.next()?, f.next()?);
            (kind == "cgroup2").then(|| PathBuf::from(at))
        })
        .next()
        .ok_or("no cgroup v2 hierarchy is mounted (`mount -t cgroup2 none /sys/fs/cgroup`)")?;
    let probe = root.join(format!("bkswitch-netcut-probe-{}", std::process::id()));
    std::fs::create_dir_all(&probe).map_err(|e| {
        format!(
            "the cgroup v2 hierarchy at {} is not writable ({e}); run as root",
            root.display()
        )
    })?;
    let _ = std::fs::remove_dir(&probe);
    Ok(root)
}

/// Runs `iptables` with `args`; an error carries what it printed.
fn iptables<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> io::Result<()> {
    let out = Command::new("iptables").args(args).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "iptables {}: {}",
            args.iter()
                .map(|a| a.as_ref().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    /// An echo server on a free loopback port.
    fn echo() -> u16 {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut s = s;
                    let mut b = [0u8; 64];
                    while let Ok(n) = s.read(&mut b) {
                        if n == 0 || s.write_all(&b[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        port
    }

    /// A one-byte round trip from a process inside the cgroup: `bash`
    /// opens the connection itself (`/dev/tcp`), given 2 s (a blackholed
    /// connect would wait for the kernel's SYN retries).
    fn in_cgroup_roundtrip(cut: &NetCut, port: u16) -> bool {
        let out = cut
            .command("timeout")
            .args([
                "2",
                "bash",
                "-c",
                &format!("exec 3<>/dev/tcp/127.0.0.1/{port} && printf x >&3 && head -c1 <&3"),
            ])
            .output()
            .unwrap();
        out.status.success() && out.stdout == b"x"
    }

    fn outside_roundtrip(port: u16) -> bool {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        s.write_all(b"y").unwrap();
        let mut b = [0u8; 1];
        s.read_exact(&mut b).is_ok() && &b == b"y"
    }

    #[test]
    fn a_cut_takes_only_the_cgroups_processes_off_the_ports_and_heals() {
        if let Err(why) = NetCut::available() {
            if std::env::var_os("BKSWITCH_REQUIRE_NETCUT").is_some() {
                panic!("network cuts are required here: {why}");
            }
            eprintln!("skipped: {why}");
            return;
        }
        let port = echo();
        let other = echo();
        let cut = NetCut::new("selftest").unwrap();
        assert!(in_cgroup_roundtrip(&cut, port), "before the cut");
        cut.cut(&[port], LinkMode::Blackhole).unwrap();
        assert!(cut.is_cut());
        assert!(
            !in_cgroup_roundtrip(&cut, port),
            "a blackhole lets a byte through"
        );
        assert!(in_cgroup_roundtrip(&cut, other), "another port is cut too");
        assert!(
            outside_roundtrip(port),
            "a process outside the cgroup is cut"
        );
        cut.cut(&[port], LinkMode::Reset).unwrap();
        assert!(
            !in_cgroup_roundtrip(&cut, port),
            "a reset lets a byte through"
        );
        cut.heal().unwrap();
        assert!(!cut.is_cut());
        assert!(in_cgroup_roundtrip(&cut, port), "after healing");
        let dir = cut.dir.clone();
        drop(cut);
        assert!(!dir.exists(), "the cgroup is left behind");
    }
}

//! Child processes that cannot outlive the test process.

use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Shell wrapper around the program. Its standard input is a pipe whose write end
/// only the test process holds: when that end closes (the harness stops the
/// program, or the test process exits in any way, destructors or not), the
/// wrapper kills the program with `SIGKILL`.
///
/// Arguments: the state folder, the log file, `remove` or `keep` (what a bare
/// close does to the state folder), `log` or `pipe` (how the program's standard
/// streams are connected), then the program and its arguments.
///
/// In `log` mode the program reads `/dev/null` and appends its output to the log,
/// and the pipe carries control lines: `term` sends `SIGTERM` (and keeps
/// watching), `keep` kills the program and keeps the state folder. A bare close
/// kills it and, with `remove`, removes the state folder once it has exited.
///
/// In `pipe` mode the pipe's bytes are the program's standard input (forwarded
/// through a FIFO in the state folder), its standard output is the wrapper's, and
/// its standard error goes to the log; the end of the pipe kills it.
const WRAPPER: &str = r#"
state="$1"; log="$2"; on_close="$3"; io="$4"; shift 4
marker="$state/.guard-stop-mode"
rm -f "$marker"
exec 3<&0
if [ "$io" = pipe ]; then
  fifo="$state/.guard-stdin"
  rm -f "$fifo"
  mkfifo "$fifo" || exit 125
  "$@" <"$fifo" 2>>"$log" 3<&- &
  pid=$!
  (
    cat <&3 >"$fifo"
    printf '%s\n' "$on_close" >"$marker"
    kill -9 "$pid" 2>/dev/null
  ) >/dev/null 2>&1 &
  watcher=$!
else
  "$@" </dev/null >>"$log" 2>&1 3<&- &
  pid=$!
  (
    mode="$on_close"
    while read -r line <&3; do
      case "$line" in
        term) kill -TERM "$pid" 2>/dev/null ;;
        *) mode="$line"; break ;;
      esac
    done
    printf '%s\n' "$mode" >"$marker"
    kill -9 "$pid" 2>/dev/null
  ) >/dev/null 2>&1 &
  watcher=$!
fi
exec 3<&- </dev/null
wait "$pid"
code=$?
kill "$watcher" 2>/dev/null
if [ "$(cat "$marker" 2>/dev/null)" = remove ]; then
  rm -rf "$state"
else
  rm -f "$marker" "$state/.guard-stdin"
fi
exit "$code"
"#;

/// How long [`GuardedProcess::kill`] and friends wait for the wrapper to exit
/// before killing the wrapper itself.
const EXIT_TIMEOUT: Duration = Duration::from_secs(20);

/// How a [`GuardedProcess`]'s program is connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardedIo {
    /// The program reads nothing (`/dev/null`) and appends its standard output
    /// and error to the log file. The harness can send it `SIGTERM`
    /// ([`GuardedProcess::terminate`]).
    Log,
    /// The program's standard input and output are pipes to the caller
    /// ([`GuardedProcess::stdin`], [`GuardedProcess::take_stdout`]); its standard
    /// error is appended to the log file. Closing the input
    /// ([`GuardedProcess::close`], drop, or the end of the test process) kills
    /// it, so a program that is still reading when the caller is done must be
    /// told to quit first if it should exit cleanly.
    Piped,
}

/// A child process that can never outlive the test process.
///
/// The program runs under a small `sh` wrapper whose standard input is a pipe
/// held only by the test process. When the pipe closes (the value is dropped,
/// [`kill`](Self::kill)ed or [`close`](Self::close)d, or the test process ends in
/// any way, including `exit` without destructors and `SIGKILL`), the wrapper
/// kills the program with `SIGKILL`; on a bare close (drop, [`close`](Self::close),
/// end of the test process) it also removes the state folder when asked to
/// ([`GuardedProcess::spawn`]'s `remove_state_on_close`). That is what makes a
/// never-dropped `static` server safe.
///
/// The state folder must exist; the wrapper keeps two small files in it while
/// the program runs (`.guard-stop-mode`, and `.guard-stdin` in
/// [`GuardedIo::Piped`] mode).
///
/// ```no_run
/// use std::process::Command;
/// use bkswitch_zk_harness::{GuardedIo, GuardedProcess};
///
/// let dir = tempfile::tempdir().unwrap();
/// let mut command = Command::new("sleep");
/// command.arg("600");
/// let log = dir.path().join("sleep.log");
/// let mut process = GuardedProcess::spawn(&command, dir.path(), &log, GuardedIo::Log, false)
///     .unwrap();
/// assert!(process.is_running());
/// process.kill(); // SIGKILL, then waits; the folder is kept
/// ```
pub struct GuardedProcess {
    child: Child,
    guard: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
    io: GuardedIo,
    state: PathBuf,
}

impl fmt::Debug for GuardedProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuardedProcess")
            .field("wrapper_pid", &self.child.id())
            .field("io", &self.io)
            .field("state", &self.state)
            .finish()
    }
}

impl GuardedProcess {
    /// Starts `command` (its program, arguments, environment changes and
    /// working folder are used; its stdio settings are not) under the wrapper.
    ///
    /// `state` is an existing folder for the wrapper's files; `log` receives the
    /// program's output as `io` says. With `remove_state_on_close`, a bare close
    /// (drop, [`close`](Self::close), end of the test process) removes `state`
    /// once the program has exited; [`kill`](Self::kill) never does.
    ///
    /// # Errors
    ///
    /// The error of spawning `sh` (a program that cannot be started makes the
    /// wrapper exit with status 127 instead: check [`is_running`](Self::is_running)
    /// and the log).
    pub fn spawn(
        command: &Command,
        state: &Path,
        log: &Path,
        io: GuardedIo,
        remove_state_on_close: bool,
    ) -> io::Result<GuardedProcess> {
        let mut wrapper = Command::new("sh");
        wrapper
            .arg("-c")
            .arg(WRAPPER)
            .arg("sh")
            .arg(state)
            .arg(log)
            .arg(if remove_state_on_close {
                "remove"
            } else {
                "keep"
            })
            .arg(match io {
                GuardedIo::Log => "log",
                GuardedIo::Piped => "pipe",
            })
            .arg(command.get_program())
            .args(command.get_args());
        for (key, value) in command.get_envs() {
            match value {
                Some(value) => wrapper.env(key, value),
                None => wrapper.env_remove(key),
            };
        }
        if let Some(dir) = command.get_current_dir() {
            wrapper.current_dir(dir);
        }
        wrapper
            .stdin(Stdio::piped())
            .stdout(match io {
                GuardedIo::Log => Stdio::null(),
                GuardedIo::Piped => Stdio::piped(),
            })
            .stderr(Stdio::null());
        let mut child = wrapper.spawn()?;
        let guard = child.stdin.take();
        let stdout = child.stdout.take();
        Ok(GuardedProcess {
            child,
            guard,
            stdout,
            io,
            state: state.to_path_buf(),
        })
    }

    /// The process id of the wrapper (`sh`), whose child the program is.
    pub fn wrapper_id(&self) -> u32 {
        self.child.id()
    }

    /// The state folder given to [`spawn`](Self::spawn).
    pub fn state_dir(&self) -> &Path {
        &self.state
    }

    /// Whether the program (and so the wrapper) is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The program's exit status once it has exited (`None` while it runs). The
    /// wrapper exits with the program's status, so a `SIGKILL`ed program shows as
    /// code 137.
    pub fn try_exit_status(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The program's standard input ([`GuardedIo::Piped`] only; `None` otherwise
    /// and after [`close`](Self::close)). Closing it kills the program.
    pub fn stdin(&mut self) -> Option<&mut ChildStdin> {
        match self.io {
            GuardedIo::Piped => self.guard.as_mut(),
            GuardedIo::Log => None,
        }
    }

    /// Takes the program's standard output ([`GuardedIo::Piped`] only; `None`
    /// otherwise or when already taken).
    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.stdout.take()
    }

    /// Sends `SIGTERM` to the program and returns at once ([`GuardedIo::Log`]
    /// only: returns `false` in [`GuardedIo::Piped`] mode or when the wrapper is
    /// gone). The wrapper keeps watching: a later close still kills it.
    pub fn terminate(&mut self) -> bool {
        if self.io != GuardedIo::Log {
            return false;
        }
        match self.guard.as_mut() {
            Some(guard) => guard
                .write_all(b"term\n")
                .and_then(|()| guard.flush())
                .is_ok(),
            None => false,
        }
    }

    /// Waits up to `timeout` for the program to exit; returns its status, or
    /// `None` if it is still running.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return Some(status),
                Err(_) => return None,
                Ok(None) if Instant::now() >= deadline => return None,
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }

    /// Kills the program with `SIGKILL` and waits for it to exit, keeping the
    /// state folder ([`GuardedIo::Log`]; in [`GuardedIo::Piped`] mode this is the
    /// same as [`close`](Self::close)).
    pub fn kill(mut self) {
        self.shut_down(true);
    }

    /// Closes the pipe, as the end of the test process would: the program is
    /// killed with `SIGKILL` and, if asked at spawn, the state folder removed.
    /// Waits for the wrapper to exit.
    pub fn close(mut self) {
        self.shut_down(false);
    }

    fn shut_down(&mut self, keep_state: bool) {
        if let Some(mut guard) = self.guard.take() {
            if keep_state && self.io == GuardedIo::Log {
                let _ = guard.write_all(b"keep\n");
                let _ = guard.flush();
            }
            drop(guard);
        }
        drop(self.stdout.take());
        if self.wait_timeout(EXIT_TIMEOUT).is_none() {
            // The wrapper did not react: kill it (the program is its child and
            // was sent SIGKILL already, or is about to be).
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Drop for GuardedProcess {
    fn drop(&mut self) {
        if self.guard.is_some() {
            self.shut_down(false);
        } else {
            let _ = self.child.try_wait();
        }
    }
}

/// A command that runs the current test binary again as a child process,
/// with only the test `test` (exact name, output shown, one thread) and the
/// environment variable `env` set to `value`; its standard output is piped,
/// its standard error discarded.
///
/// For tests of what happens when a process that uses a harness exits: the
/// named test, seeing `env`, starts what it must (a shared server, a
/// cluster), prints what the parent needs to watch on standard output, then
/// exits or waits as `value` tells it; the parent reads those lines and
/// checks that nothing outlives the child.
pub fn helper_test_command(test: &str, env: &str, value: &str) -> Command {
    let exe = std::env::current_exe().unwrap_or_else(|e| {
        panic!("cannot find the running test binary to run `{test}` as a helper: {e}")
    });
    let mut command = Command::new(exe);
    command
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(env, value)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    command
}

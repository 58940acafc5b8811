//! [`ProcessUsage`]: what a process has used so far, from `/proc`.

/// What a process has used so far: CPU time, read and write system calls.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessUsage {
    /// User + system CPU time, in seconds.
    pub cpu_seconds: f64,
    /// Read system calls (`syscr` of `/proc/<pid>/io`).
    pub read_calls: u64,
    /// Write system calls (`syscw`).
    pub write_calls: u64,
}

impl ProcessUsage {
    /// The usage of process `pid` (zeros for what cannot be read).
    pub fn of(pid: u32) -> ProcessUsage {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let after_name = stat.rsplit(')').next().unwrap_or_default();
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
        let io_field = |name: &str| {
            io.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        };
        ProcessUsage {
            // utime and stime, fields 14 and 15 of the line (11 and 12 after the
            // name), in clock ticks of 1/100 s.
            cpu_seconds: (ticks(11) + ticks(12)) / 100.0,
            read_calls: io_field("syscr:"),
            write_calls: io_field("syscw:"),
        }
    }

    /// This process's usage.
    pub fn current() -> ProcessUsage {
        ProcessUsage::of(std::process::id())
    }
}

impl std::ops::Add for ProcessUsage {
    type Output = ProcessUsage;
    fn add(self, o: ProcessUsage) -> ProcessUsage {
        ProcessUsage {
            cpu_seconds: self.cpu_seconds + o.cpu_seconds,
            read_calls: self.read_calls + o.read_calls,
            write_calls: self.write_calls + o.write_calls,
        }
    }
}

impl std::ops::Sub for ProcessUsage {
    type Output = ProcessUsage;
    fn sub(self, o: ProcessUsage) -> ProcessUsage {
        ProcessUsage {
            cpu_seconds: self.cpu_seconds - o.cpu_seconds,
            read_calls: self.read_calls.saturating_sub(o.read_calls),
            write_calls: self.write_calls.saturating_sub(o.write_calls),
        }
    }
}

//! Apache Pulsar's own proxy (`ProxyServiceStarter`) in front of one broker,
//! configured as a practitioner would for lookup throughput.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bkswitch_zk_harness::{GuardedIo, GuardedProcess};

use crate::install::{proxy_install, JavaInstall};
use crate::logs::{keep_dirs, log_excerpt, tail};
use crate::standalone::{contains, free_port, PulsarStandalone};
use crate::{HarnessError, PULSAR_JAVA_FLAGS};

/// How long [`PulsarProxy::start`] waits for both listeners by default (the
/// proxy alone is up in 4 to 6 s).
pub const PROXY_START_TIMEOUT: Duration = Duration::from_secs(60);

const MAIN_CLASS: &str = "org.apache.pulsar.proxy.server.ProxyServiceStarter";
/// Logged once the binary listener is bound (Pulsar's `ProxyService`).
const BINARY_READY: &str = "Started Pulsar Proxy at";
/// Logged once the HTTP listener is bound (Pulsar's proxy `WebServer`),
/// after the binary one.
const WEB_READY: &str = "Server started at end point";
const PORT_ATTEMPTS: u32 = 3;

fn cores() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// The options of a [`PulsarProxy`]: the broker it fronts, `proxy.conf`
/// lines, JVM memory and flags, the start timeout.
#[derive(Debug, Clone)]
pub struct PulsarProxyOptions {
    cluster: String,
    broker_service_url: String,
    broker_web_service_url: String,
    conf: Vec<(String, String)>,
    heap_mb: u32,
    max_direct_memory_mb: u32,
    start_timeout: Duration,
    jvm_args: Vec<String>,
}

impl PulsarProxyOptions {
    /// A proxy in front of `broker` (its cluster name, `brokerServiceURL` and
    /// `brokerWebServiceURL`, no metadata store), with the harness's
    /// configuration (see [`PulsarProxy::start`]).
    pub fn new(broker: &PulsarStandalone) -> Self {
        Self::for_urls(broker.name(), &broker.broker_url(), &broker.http_url())
    }

    /// A proxy in front of the broker of cluster `cluster` at `service_url`
    /// (`pulsar://…`) and `web_service_url` (`http://…`).
    pub fn for_urls(cluster: &str, service_url: &str, web_service_url: &str) -> Self {
        Self {
            cluster: cluster.to_owned(),
            broker_service_url: service_url.to_owned(),
            broker_web_service_url: web_service_url.to_owned(),
            conf: Vec::new(),
            heap_mb: 512,
            max_direct_memory_mb: 256,
            start_timeout: PROXY_START_TIMEOUT,
            jvm_args: Vec::new(),
        }
    }

    /// Sets a `proxy.conf` key over the harness's value, if it has one
    /// (`numIOThreads`, `brokerClient_connectionsPerBroker`, …). The ports and
    /// addresses are the harness's and are better left alone.
    pub fn conf(mut self, key: &str, value: impl ToString) -> Self {
        crate::standalone::set_conf(&mut self.conf, key, value.to_string());
        self
    }

    /// The JVM's heap, fixed (`-Xms` = `-Xmx`), in MB (512 by default).
    pub fn heap_mb(mut self, mb: u32) -> Self {
        self.heap_mb = mb;
        self
    }

    /// The JVM's direct memory limit (`-XX:MaxDirectMemorySize`), in MB (256 by
    /// default).
    pub fn max_direct_memory_mb(mut self, mb: u32) -> Self {
        self.max_direct_memory_mb = mb;
        self
    }

    /// How long a start waits ([`PROXY_START_TIMEOUT`] by default).
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// An extra JVM argument (after the harness's, before the main class).
    pub fn jvm_arg(mut self, arg: &str) -> Self {
        self.jvm_args.push(arg.to_owned());
        self
    }

    /// The `proxy.conf` a start writes with these ports (binary, HTTP).
    pub fn conf_text(&self, service_port: u16, web_port: u16) -> String {
        let threads = cores().to_string();
        let mut conf: Vec<(String, String)> = [
            ("clusterName", self.cluster.as_str()),
            ("brokerServiceURL", self.broker_service_url.as_str()),
            ("brokerWebServiceURL", self.broker_web_service_url.as_str()),
            ("bindAddress", "127.0.0.1"),
            ("advertisedAddress", "127.0.0.1"),
            ("servicePort", &service_port.to_string()),
            ("webServicePort", &web_port.to_string()),
            // The brokers of the harness listen on free ports, not on 6650.
            ("brokerProxyAllowedTargetPorts", "*"),
            // The proxy's client to the broker opens a UDP socket for DNS,
            // bound to every address unless told (it resolves nothing here:
            // brokers are named by address).
            ("brokerClient_dnsLookupBindAddress", "127.0.0.1"),
            // Lookup throughput: one Netty event loop per core (the default
            // is two per core), no lookup throttling, no connection cap, no
            // per-frame parsing or logging.
            ("numIOThreads", &threads),
            ("numAcceptorThreads", "1"),
            ("maxConcurrentLookupRequests", "1000000"),
            ("maxConcurrentInboundConnections", "100000"),
            ("maxConcurrentInboundConnectionsPerIp", "0"),
            ("proxyLogLevel", "0"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        for (key, value) in &self.conf {
            match conf.iter_mut().find(|(k, _)| k == key) {
                Some(entry) => entry.1 = value.clone(),
                None => conf.push((key.clone(), value.clone())),
            }
        }
        conf.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
    }

    /// The JVM flags of Pulsar's Helm chart for proxies (G1 with 10 ms pauses,
    /// Netty's leak detection off), its GC threads sized to the cores, and a
    /// fixed heap.
    fn jvm_flags(&self) -> Vec<String> {
        let threads = cores();
        let mut flags: Vec<String> = vec![
            format!("-Xms{}m", self.heap_mb),
            format!("-Xmx{}m", self.heap_mb),
            format!("-XX:MaxDirectMemorySize={}m", self.max_direct_memory_mb),
        ];
        flags.extend(
            [
                "-XX:+UseG1GC",
                "-XX:MaxGCPauseMillis=10",
                "-Dio.netty.leakDetectionLevel=disabled",
                "-Dio.netty.recycler.linkCapacity=1024",
                "-XX:+ParallelRefProcEnabled",
                "-XX:+UnlockExperimentalVMOptions",
                "-XX:+DoEscapeAnalysis",
                "-XX:G1NewSizePercent=50",
                "-XX:+DisableExplicitGC",
                "-XX:-ResizePLAB",
                "-XX:+ExitOnOutOfMemoryError",
                "-XX:+PerfDisableSharedMem",
                "-XX:-UsePerfData",
            ]
            .map(str::to_owned),
        );
        flags.push(format!("-XX:ParallelGCThreads={threads}"));
        flags.push(format!("-XX:ConcGCThreads={threads}"));
        flags.extend(PULSAR_JAVA_FLAGS.iter().map(|f| (*f).to_owned()));
        flags.extend(self.jvm_args.iter().cloned());
        flags
    }
}

/// A running Apache Pulsar proxy (`ProxyServiceStarter`, version
/// [`PULSAR_PROXY_VERSION`](crate::PULSAR_PROXY_VERSION)) on `127.0.0.1`, in a
/// temporary folder of its own, pointed straight at one broker. Its JVM runs
/// under [`GuardedProcess`]: dropping the proxy kills it and removes its
/// folder, and so does the end of the test process, however it ends.
pub struct PulsarProxy {
    service_port: u16,
    web_port: u16,
    dir: PathBuf,
    pid: Option<u32>,
    process: Mutex<Option<GuardedProcess>>,
}

impl fmt::Debug for PulsarProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PulsarProxy")
            .field("service_url", &self.service_url())
            .field("http_url", &self.http_url())
            .field("dir", &self.dir)
            .finish()
    }
}

impl PulsarProxy {
    /// Starts a proxy and returns once both its listeners are bound.
    ///
    /// Its `proxy.conf`: `clusterName` (Pulsar's proxy refuses to start
    /// without one), `brokerServiceURL` and `brokerWebServiceURL` of the
    /// options (no metadata store: no discovery), `bindAddress` and
    /// `advertisedAddress` `127.0.0.1`, free `servicePort` and
    /// `webServicePort`, `brokerProxyAllowedTargetPorts=*`,
    /// `brokerClient_dnsLookupBindAddress=127.0.0.1` (so that every socket it
    /// holds is on loopback); for lookups
    /// `numIOThreads` sized to the cores,
    /// `maxConcurrentLookupRequests=1000000`,
    /// `maxConcurrentInboundConnections=100000` and none per address,
    /// `proxyLogLevel=0`; then the options' own lines. The JVM: a fixed heap
    /// (512 MB by default) and the flags of Pulsar's Helm chart for proxies.
    ///
    /// # Errors
    ///
    /// When java or the jars are missing, or the proxy exits or is not ready
    /// within the timeout (the error has the end of its log).
    pub async fn start(options: PulsarProxyOptions) -> Result<PulsarProxy, HarnessError> {
        let install = proxy_install()?;
        let dir = tempfile::Builder::new()
            .prefix("bkswitch-pulsar-proxy-")
            .tempdir()
            .map_err(|e| HarnessError::new(format!("cannot create a temporary folder: {e}")))?
            .keep();
        let mut last = None;
        for _ in 0..PORT_ATTEMPTS {
            let ports = [free_port()?, free_port()?];
            match launch(&install, &options, &dir, ports).await {
                Ok(proxy) => return Ok(proxy),
                Err((true, e)) => last = Some(e),
                Err((false, e)) => {
                    last = Some(e);
                    break;
                }
            }
        }
        if !keep_dirs() {
            let _ = fs::remove_dir_all(&dir);
        }
        Err(last.unwrap_or_else(|| HarnessError::new("no port attempt made")))
    }

    /// The proxy's service URL, `pulsar://127.0.0.1:<port>`.
    pub fn service_url(&self) -> String {
        format!("pulsar://127.0.0.1:{}", self.service_port)
    }

    /// The proxy's HTTP URL, `http://127.0.0.1:<port>`.
    pub fn http_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.web_port)
    }

    /// The binary protocol port.
    pub fn service_port(&self) -> u16 {
        self.service_port
    }

    /// The HTTP port.
    pub fn web_port(&self) -> u16 {
        self.web_port
    }

    /// The proxy's folder: `proxy.conf`, `proxy.log`, `log4j2.properties`.
    /// Removed with the proxy unless `BKSWITCH_KEEP_PULSAR_DIRS=1`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The proxy's log (its standard output and error).
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("proxy.log")
    }

    /// The last `lines` lines of the proxy's log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log_path(), lines)
    }

    /// The process id of the proxy's JVM (`None` once it was stopped or
    /// killed).
    pub fn pid(&self) -> Option<u32> {
        self.lock().as_ref().and(self.pid)
    }

    /// Whether the proxy's JVM is alive.
    pub fn is_running(&self) -> bool {
        self.lock().as_mut().is_some_and(GuardedProcess::is_running)
    }

    /// Stops the proxy (`SIGTERM`) and waits for the JVM to exit; kills it if
    /// it has not after 30 s. The folder stays until the proxy is dropped.
    pub fn stop(&self) {
        if let Some(mut process) = self.lock().take() {
            if process.terminate() && process.wait_timeout(Duration::from_secs(30)).is_some() {
                return;
            }
            process.kill();
        }
    }

    /// Kills the proxy with `SIGKILL` and waits for the JVM to exit.
    pub fn kill(&self) {
        if let Some(process) = self.lock().take() {
            process.kill();
        }
    }

    fn lock(&self) -> MutexGuard<'_, Option<GuardedProcess>> {
        self.process.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for PulsarProxy {
    fn drop(&mut self) {
        if let Some(process) = self.lock().take() {
            process.kill();
        }
        if keep_dirs() {
            eprintln!("pulsar-harness: kept {}", self.dir.display());
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// The log4j2 configuration: everything at INFO to standard output (the
/// proxy's log); Jetty at WARN.
const LOG4J: &str = "status = error
name = pulsar-harness-proxy
appender.out.type = Console
appender.out.name = out
appender.out.target = SYSTEM_OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = %d{HH:mm:ss.SSS} %-5level [%t] %c{1} - %msg%n
logger.jetty.name = org.eclipse.jetty
logger.jetty.level = WARN
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
";

/// Starts the JVM and waits; `Err((true, _))` when a port was taken
/// meanwhile (try other ports).
async fn launch(
    install: &JavaInstall,
    options: &PulsarProxyOptions,
    dir: &Path,
    [service_port, web_port]: [u16; 2],
) -> Result<PulsarProxy, (bool, HarnessError)> {
    let failed = |e: String| (false, HarnessError::new(e));
    let write = |name: &str, text: &str| {
        fs::write(dir.join(name), text)
            .map_err(|e| failed(format!("cannot write {}: {e}", dir.join(name).display())))
    };
    write("proxy.conf", &options.conf_text(service_port, web_port))?;
    write("log4j2.properties", LOG4J)?;
    let log = dir.join("proxy.log");
    let _ = fs::remove_file(&log);
    let pid_file = dir.join("proxy.pid");
    let _ = fs::remove_file(&pid_file);

    // `sh` writes its own pid and becomes the JVM (`exec`).
    let mut command = Command::new("sh");
    command
        .args(["-c", "echo $$ >\"$0\"; exec \"$@\""])
        .arg(&pid_file)
        .arg(&install.java)
        .args(options.jvm_flags())
        .arg(format!(
            "-Dlog4j2.configurationFile={}",
            dir.join("log4j2.properties").display()
        ))
        .arg("-cp")
        .arg(format!("{}/*", install.lib.display()))
        .arg(MAIN_CLASS)
        .arg("--config")
        .arg(dir.join("proxy.conf"))
        .current_dir(dir);
    let mut process = GuardedProcess::spawn(&command, dir, &log, GuardedIo::Log, !keep_dirs())
        .map_err(|e| failed(format!("cannot run sh to start Pulsar's proxy: {e}")))?;

    let deadline = Instant::now() + options.start_timeout;
    loop {
        let text = fs::read(&log).unwrap_or_default();
        if contains(&text, BINARY_READY.as_bytes()) && contains(&text, WEB_READY.as_bytes()) {
            break;
        }
        if !process.is_running() {
            let status = process.try_exit_status();
            let excerpt = log_excerpt(&log, 40);
            let message = format!(
                "Pulsar's proxy exited during its start ({}); log {}:\n{excerpt}",
                status.map_or_else(|| "no status".to_owned(), |s| s.to_string()),
                log.display()
            );
            let taken = excerpt.contains("Address already in use");
            return Err((taken, HarnessError::new(message)));
        }
        if Instant::now() >= deadline {
            process.kill();
            return Err(failed(format!(
                "Pulsar's proxy was not ready within {:?}; log {}:\n{}",
                options.start_timeout,
                log.display(),
                log_excerpt(&log, 40)
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let pid = fs::read_to_string(&pid_file)
        .ok()
        .and_then(|p| p.trim().parse().ok());
    Ok(PulsarProxy {
        service_port,
        web_port,
        dir: dir.to_path_buf(),
        pid,
        process: Mutex::new(Some(process)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_conf_points_at_the_broker_and_options_override() {
        let options =
            PulsarProxyOptions::for_urls("c", "pulsar://127.0.0.1:7000", "http://127.0.0.1:7001")
                .conf("numIOThreads", 8)
                .conf("brokerClient_connectionsPerBroker", 4);
        let text = options.conf_text(1, 2);
        assert!(text.starts_with("clusterName=c\n"));
        assert!(text.contains("brokerServiceURL=pulsar://127.0.0.1:7000\n"));
        assert!(text.contains("brokerWebServiceURL=http://127.0.0.1:7001\n"));
        assert!(text.contains("servicePort=1\nwebServicePort=2\n"));
        assert!(text.contains("bindAddress=127.0.0.1\n"));
        assert_eq!(text.matches("numIOThreads=").count(), 1);
        assert!(text.contains("numIOThreads=8\n"));
        assert!(text.ends_with("brokerClient_connectionsPerBroker=4\n"));
        assert!(!text.contains("metadataStoreUrl"));
    }

    #[test]
    fn the_heap_is_fixed() {
        let flags = PulsarProxyOptions::for_urls("c", "pulsar://h:1", "http://h:2")
            .heap_mb(300)
            .jvm_flags();
        assert!(flags.contains(&"-Xms300m".to_owned()));
        assert!(flags.contains(&"-Xmx300m".to_owned()));
        assert!(flags.contains(&"-XX:+UseG1GC".to_owned()));
    }
}

//! Where a cluster benchmark's time went outside errand: CPU seconds of each process on the machine (from `/proc`) and kube-apiserver's request latency by verb and resource (from its `/metrics`).

use std::collections::BTreeMap;
use std::time::Instant;

use kube::Client;

/// The processes of the test cluster and its peers, by `/proc/PID/comm` (at most 15 bytes).
pub const PROCESSES: [&str; 8] = [
    "kube-apiserver",
    "etcd",
    "kube-controller",
    "kube-scheduler",
    "kwok",
    "kubelet",
    "containerd",
    "witness-node",
];

/// User plus system CPU seconds of process `pid` (`"self"` for this one) so far.
pub fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command's closing parenthesis: utime and stime are the 12th and 13th,
    // in USER_HZ ticks (100 a second on Linux).
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    Some((ticks(11)? + ticks(12)?) / 100.0)
}

/// A field of `/proc/PID/status` in KiB (`VmRSS:`, `VmHWM:`), or 0.
pub fn status_kib(pid: &str, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// CPU seconds so far of every running process whose name is one of [`PROCESSES`], summed
/// by name.
pub fn process_cpu() -> BTreeMap<&'static str, f64> {
    let mut seconds = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return seconds;
    };
    for entry in entries.flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(comm) = std::fs::read_to_string(format!("/proc/{pid}/comm")) else {
            continue;
        };
        let Some(name) = PROCESSES.iter().find(|n| **n == comm.trim_end()) else {
            continue;
        };
        if let Some(cpu) = cpu_seconds(&pid) {
            *seconds.entry(*name).or_insert(0.0) += cpu;
        }
    }
    seconds
}

/// kube-apiserver's `apiserver_request_duration_seconds` histogram, by
/// `<VERB> <resource>[/<subresource>]`: request count, seconds summed, and cumulative counts
/// by bucket bound.
#[derive(Clone, Debug, Default)]
pub struct RequestLatency(BTreeMap<String, Histogram>);

/// One series of the histogram.
#[derive(Clone, Debug, Default)]
struct Histogram {
    count: f64,
    sum: f64,
    /// `(le, cumulative count)`, in the order the API server prints them (ascending `le`).
    buckets: Vec<(f64, f64)>,
}

/// One row of [`RequestLatency::since`]: what the API server answered for one kind of
/// request between two readings.
pub struct LatencyRow {
    /// `<VERB> <resource>[/<subresource>]`.
    pub request: String,
    /// Requests answered.
    pub count: f64,
    /// Mean latency in milliseconds.
    pub mean_ms: f64,
    /// The bucket bound that 99 % of the requests were under, in milliseconds.
    pub p99_ms: f64,
}

impl RequestLatency {
    /// Reads the histogram from kube-apiserver's `/metrics`.
    pub async fn read(client: &Client) -> Result<Self, kube::Error> {
        let request = http::Request::get("/metrics")
            .body(Vec::new())
            .expect("a GET request");
        Ok(Self::parse(&client.request_text(request).await?))
    }

    /// Parses the `apiserver_request_duration_seconds` series of a Prometheus text page,
    /// summed over the labels other than verb, resource and subresource.
    fn parse(text: &str) -> Self {
        const NAME: &str = "apiserver_request_duration_seconds_";
        let mut series: BTreeMap<String, Histogram> = BTreeMap::new();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix(NAME) else {
                continue;
            };
            let Some((kind, rest)) = rest.split_once('{') else {
                continue;
            };
            let Some((labels, value)) = rest.rsplit_once("} ") else {
                continue;
            };
            let Ok(value) = value.trim().parse::<f64>() else {
                continue;
            };
            let label = |name: &str| {
                labels.split(',').find_map(|pair| {
                    let (key, value) = pair.split_once('=')?;
                    (key == name).then(|| value.trim_matches('"').to_owned())
                })
            };
            let (Some(verb), Some(resource)) = (label("verb"), label("resource")) else {
                continue;
            };
            let key = match label("subresource").filter(|s| !s.is_empty()) {
                Some(sub) => format!("{verb} {resource}/{sub}"),
                None => format!("{verb} {resource}"),
            };
            let histogram = series.entry(key).or_default();
            match kind {
                "count" => histogram.count += value,
                "sum" => histogram.sum += value,
                "bucket" => {
                    let le =
                        label("le").map_or(f64::INFINITY, |le| le.parse().unwrap_or(f64::INFINITY));
                    match histogram.buckets.iter_mut().find(|(b, _)| *b == le) {
                        Some((_, n)) => *n += value,
                        None => histogram.buckets.push((le, value)),
                    }
                }
                _ => {}
            }
        }
        Self(series)
    }

    /// The requests answered since `before`, by kind, most first.
    pub fn since(&self, before: &Self) -> Vec<LatencyRow> {
        let mut rows: Vec<LatencyRow> = self
            .0
            .iter()
            .filter_map(|(request, now)| {
                let then = before.0.get(request).cloned().unwrap_or_default();
                let count = now.count - then.count;
                if count <= 0.0 {
                    return None;
                }
                let bucket_then = |le: f64| {
                    then.buckets
                        .iter()
                        .find(|(b, _)| *b == le)
                        .map_or(0.0, |(_, n)| *n)
                };
                let p99 = now
                    .buckets
                    .iter()
                    .find(|(le, n)| n - bucket_then(*le) >= 0.99 * count)
                    .map_or(f64::INFINITY, |(le, _)| *le);
                Some(LatencyRow {
                    request: request.clone(),
                    count,
                    mean_ms: (now.sum - then.sum) / count * 1000.0,
                    p99_ms: p99 * 1000.0,
                })
            })
            .collect();
        rows.sort_by(|a, b| b.count.total_cmp(&a.count));
        rows
    }
}

/// A stretch of a benchmark over which the processes' CPU time and the API server's requests
/// are counted.
pub struct Window {
    opened: Instant,
    processes: BTreeMap<&'static str, f64>,
    latency: RequestLatency,
}

/// What the processes and the API server spent over a [`Window`].
pub struct Spent {
    /// How long the window was open.
    pub seconds: f64,
    /// CPU seconds by process name.
    pub processes: BTreeMap<&'static str, f64>,
    /// The requests the API server answered, by kind, most first.
    pub requests: Vec<LatencyRow>,
}

impl Window {
    /// Opens a window now.
    pub async fn open(client: &Client) -> Self {
        Self {
            processes: process_cpu(),
            latency: RequestLatency::read(client)
                .await
                .expect("kube-apiserver's /metrics"),
            opened: Instant::now(),
        }
    }

    /// Closes the window now.
    pub async fn close(self, client: &Client) -> Spent {
        let now = process_cpu();
        let processes = now
            .iter()
            .map(|(name, s)| (*name, s - self.processes.get(name).copied().unwrap_or(0.0)))
            .collect();
        let requests = RequestLatency::read(client)
            .await
            .expect("kube-apiserver's /metrics")
            .since(&self.latency);
        Spent {
            seconds: self.opened.elapsed().as_secs_f64(),
            processes,
            requests,
        }
    }
}

impl Spent {
    /// CPU seconds of the processes named `name` (0 if none ran).
    pub fn cpu(&self, name: &str) -> f64 {
        self.processes.get(name).copied().unwrap_or(0.0)
    }

    /// CPU seconds of every process counted.
    pub fn total_cpu(&self) -> f64 {
        self.processes.values().sum()
    }

    /// Requests the API server answered, of every kind.
    pub fn total_requests(&self) -> f64 {
        self.requests.iter().map(|r| r.count).sum()
    }

    /// The row of requests of kind `request` (`POST jobs`), if any were answered.
    pub fn request(&self, request: &str) -> Option<&LatencyRow> {
        self.requests.iter().find(|r| r.request == request)
    }
}

/// Asks kube-apiserver for a CPU profile of its next `seconds` (`/debug/pprof/profile`: the
/// cluster must run it with `--profiling`) and writes it to `path`, for `go tool pprof`.
pub async fn profile_apiserver(
    client: &Client,
    seconds: u64,
    path: &std::path::Path,
) -> Result<(), String> {
    use http_body_util::BodyExt;
    let request = http::Request::get(format!("/debug/pprof/profile?seconds={seconds}"))
        .body(kube::client::Body::empty())
        .expect("a GET request");
    let response = client.send(request).await.map_err(|e| e.to_string())?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    if !status.is_success() {
        return Err(format!(
            "{status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        ));
    }
    std::fs::write(path, &body).map_err(|e| format!("writing {}: {e}", path.display()))
}

/// The top of a CPU profile by cumulative time (`go tool pprof -top -cum`), the lines whose
/// function name ends with one of `functions`, in the profile's order.
pub fn profile_lines(path: &std::path::Path, functions: &[&str]) -> Result<Vec<String>, String> {
    let output = std::process::Command::new("go")
        .args(["tool", "pprof", "-top", "-cum", "-nodecount=400"])
        .arg(path)
        .output()
        .map_err(|e| format!("running go tool pprof: {e}"))?;
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    let text = String::from_utf8_lossy(&output.stdout);
    Ok(text
        .lines()
        .filter(|line| {
            line.starts_with("Duration")
                || line.contains("flat%")
                || line
                    .split_whitespace()
                    .last()
                    .is_some_and(|name| functions.iter().any(|f| name.ends_with(f)))
        })
        .map(str::to_owned)
        .collect())
}

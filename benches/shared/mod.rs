//! What the benchmarks share: a generated mixed tree, test data, timing of paired runs and their summaries, percentiles, and the entry of the cluster benchmarks.
#![allow(dead_code)]

use std::fs;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::resource::{UsageWho, getrusage};

pub mod cluster;
pub mod control_plane;

/// One mebibyte.
pub const MIB: u64 = 1024 * 1024;
/// Bump when the generated tree changes, so a cached tree from an older version is rebuilt.
const TREE_VERSION: &str = "mixed-v1";

/// Generates (or reuses) a deterministic mixed tree of about `total` bytes: a quarter small
/// text files (source-like lines, 1-16 KiB, in nested directories), half incompressible
/// binaries (like media, archives, compressed shards) and a quarter float32 weight shards,
/// which deflate shrinks only a little at full cost.
pub fn generate(tree: &Path, total: u64) -> (u64, u64) {
    let marker = tree.join(".generated");
    let stamp = format!("{TREE_VERSION} {total}");
    if fs::read_to_string(&marker).ok().as_deref() == Some(stamp.as_str()) {
        return count(tree);
    }
    let _ = fs::remove_dir_all(tree);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let words: Vec<String> = (0..2000)
        .map(|_| {
            let len = 2 + rng.below(9) as usize;
            (0..len)
                .map(|_| (b'a' + rng.below(26) as u8) as char)
                .collect()
        })
        .collect();
    let punct = ["(", ")", " = ", ", ", ";", ".", " {", "}", ": ", " -> "];

    let text_budget = total / 4;
    let mut written = 0u64;
    let mut i = 0u64;
    while written < text_budget {
        let dir = tree.join(format!("src/pkg{:03}/mod{:02}", i / 400, (i / 20) % 20));
        if i.is_multiple_of(20) {
            fs::create_dir_all(&dir).expect("mkdir");
        }
        let target = 1024 + rng.below(15 * 1024);
        let mut text = String::with_capacity(target as usize + 256);
        while (text.len() as u64) < target {
            let indent = rng.below(4) as usize * 4;
            text.extend(std::iter::repeat_n(' ', indent));
            for _ in 0..3 + rng.below(10) {
                // The smaller of two draws skews towards common words, as in real text.
                let w = rng.below(2000).min(rng.below(2000)) as usize;
                text.push_str(&words[w]);
                text.push_str(punct[rng.below(punct.len() as u64) as usize]);
            }
            text.push('\n');
        }
        fs::write(dir.join(format!("file{i:06}.txt")), &text).expect("write text");
        written += text.len() as u64;
        i += 1;
    }

    let shard = (total / 8).max(MIB);
    fs::create_dir_all(tree.join("assets")).expect("mkdir");
    fs::create_dir_all(tree.join("models")).expect("mkdir");
    for n in 0..4 {
        write_blob(&tree.join(format!("assets/blob{n}.bin")), shard, |buf| {
            rng.fill(buf)
        });
    }
    for n in 0..2 {
        write_blob(&tree.join(format!("models/shard{n}.f32")), shard, |buf| {
            for w in buf.chunks_exact_mut(4) {
                // Roughly normal weights with a small spread: repetitive exponents, random mantissas.
                let x =
                    (0..4).map(|_| rng.below(1 << 16) as f32).sum::<f32>() / (4.0 * 65536.0) - 0.5;
                w.copy_from_slice(&(x * 0.08).to_le_bytes());
            }
        });
    }
    fs::write(&marker, stamp).expect("marker");
    count(tree)
}

pub fn write_blob(path: &Path, size: u64, mut fill: impl FnMut(&mut [u8])) {
    let mut out = BufWriter::new(fs::File::create(path).expect("create blob"));
    let mut buf = vec![0u8; MIB as usize];
    let mut left = size;
    while left > 0 {
        let n = left.min(MIB) as usize;
        fill(&mut buf[..n]);
        out.write_all(&buf[..n]).expect("write blob");
        left -= n as u64;
    }
    out.flush().expect("flush blob");
}

pub fn count(tree: &Path) -> (u64, u64) {
    let (mut files, mut bytes) = (0, 0);
    let mut stack = vec![tree.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).expect("read dir") {
            let entry = entry.expect("entry");
            let meta = entry.metadata().expect("metadata");
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                files += 1;
                bytes += meta.len();
            }
        }
    }
    (files, bytes)
}

/// xorshift64*: fast, deterministic, good enough for test data.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// User plus system CPU time of this process or of its waited children.
pub fn cpu_time(who: UsageWho) -> Duration {
    let usage = getrusage(who).expect("getrusage");
    let micros = |t: nix::sys::time::TimeVal| t.tv_sec() as u64 * 1_000_000 + t.tv_usec() as u64;
    Duration::from_micros(micros(usage.user_time()) + micros(usage.system_time()))
}

pub fn sync() {
    // Flush dirty pages from the previous run so it does not slow the next one down.
    let _ = Command::new("sync").status();
}

/// Wall and CPU time of one timed run.
#[derive(Clone, Copy)]
pub struct Timed {
    /// Wall-clock time.
    pub wall: Duration,
    /// CPU time.
    pub cpu: Duration,
}

impl std::fmt::Display for Timed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.2}s wall {:.2}s cpu",
            self.wall.as_secs_f64(),
            self.cpu.as_secs_f64()
        )
    }
}

/// Runs a child process to completion, timing it (CPU of it and its children).
pub fn timed_child(command: &mut Command) -> Timed {
    sync();
    let (started, cpu) = (Instant::now(), cpu_time(UsageWho::RUSAGE_CHILDREN));
    let status = command.status().expect("run baseline");
    assert!(status.success(), "baseline failed: {command:?}");
    Timed {
        wall: started.elapsed(),
        cpu: cpu_time(UsageWho::RUSAGE_CHILDREN) - cpu,
    }
}

/// Runs `work` in this process, timing it (CPU of all of this process's threads).
pub fn timed_self(work: impl FnOnce()) -> Timed {
    sync();
    let (started, cpu) = (Instant::now(), cpu_time(UsageWho::RUSAGE_SELF));
    work();
    Timed {
        wall: started.elapsed(),
        cpu: cpu_time(UsageWho::RUSAGE_SELF) - cpu,
    }
}

/// Both sides of one run, the baseline first on even runs and second on odd ones.
pub fn paired(
    run: usize,
    baseline: &mut impl FnMut() -> Timed,
    ours: &mut impl FnMut() -> Timed,
) -> (Timed, Timed) {
    if run.is_multiple_of(2) {
        let theirs = baseline();
        (theirs, ours())
    } else {
        let ours = ours();
        (baseline(), ours)
    }
}

/// Median wall time of each side and the median of the per-run ratios.
pub fn summarize(runs: &[(Timed, Timed)]) -> (Duration, Duration, f64) {
    fn median<T: Copy + PartialOrd>(mut v: Vec<T>) -> T {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        v[v.len() / 2]
    }
    (
        median(runs.iter().map(|(t, _)| t.wall).collect()),
        median(runs.iter().map(|(_, o)| o.wall).collect()),
        median(
            runs.iter()
                .map(|(t, o)| o.wall.as_secs_f64() / t.wall.as_secs_f64())
                .collect(),
        ),
    )
}

pub fn fmt_s(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

pub fn fmt_mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / MIB as f64)
}

pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The `p`th percentile of `values` (nearest rank).
pub fn percentile(values: &[f64], p: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let index = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[index]
}

/// Runs the async benchmark `bench` when `cargo bench --bench NAME` invokes it (the test
/// harness's `cargo test --benches` only checks it builds, so it prints that it skipped): on a
/// tokio runtime, with warnings (such as a controller's failed reconciles in this process) on
/// stderr. Exits non-zero when `bench` returns false.
pub fn run_async<F: std::future::Future<Output = bool>>(name: &str, bench: impl FnOnce() -> F) {
    if !std::env::args().any(|a| a == "--bench") {
        println!("{name} benchmark: skipped outside `cargo bench --bench {name}`");
        return;
    }
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn"))
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    if !runtime.block_on(bench()) {
        std::process::exit(1);
    }
}

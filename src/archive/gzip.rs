//! Parallel gzip: the tar stream is cut into fixed-size chunks, each chunk is compressed on a
//! worker thread into one or more gzip members, and the members are emitted in chunk order.
//!
//! A sequence of gzip members is itself a valid gzip file (RFC 1952 §2.2), which `gzip -d` and
//! `tar -xzf` read. Chunk boundaries sit at fixed offsets of the tar stream and the compression
//! of a chunk depends only on its bytes, so the output is the same whatever the thread timing —
//! filesets stay content-addressable.
//!
//! Blocks whose bytes are close to uniformly distributed (compressed media, archives, encrypted
//! data) gain nothing from deflate but cost as much CPU as text, so they are written as stored
//! deflate blocks: the same size as gzip's output for such data, at memcpy speed.

use std::io::{self, Read};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread;

use bytes::Bytes;
use flate2::{Compress, Compression, Crc, FlushCompress, Status};

/// Size of the unit of parallel work. Large enough that restarting the deflate window per
/// chunk costs well under 0.1% of output size, small enough that a handful in flight stay
/// within the streaming memory budget.
pub(super) const CHUNK: usize = 1024 * 1024;
/// Granularity at which compressible and incompressible data are told apart.
const BLOCK: usize = 64 * 1024;
/// Order-0 entropy (bits per byte) above which a block is stored rather than deflated. Uniform
/// random 64 KiB blocks measure about 7.997; deflate can save at most 0.6% on data at 7.95.
const STORE_ENTROPY: f64 = 7.95;
/// The level `gzip` and `tar -z` use by default.
const LEVEL: u32 = 6;
/// Largest payload of one stored deflate block.
const MAX_STORED: usize = 65_535;
/// gzip member header: magic, deflate, no flags, no mtime, no extra flags, OS unknown. Constant,
/// so that output depends only on input.
const GZIP_HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255];

/// The writing end of the pipeline: callers fill chunks, which are compressed in parallel.
/// The worker threads start with the first full chunk, so a stream that fits in one chunk
/// (most run records and small workdirs) is compressed on the caller's thread instead.
pub(super) struct Chunker {
    buf: Vec<u8>,
    len: usize,
    workers: usize,
    out: tokio::sync::mpsc::Sender<io::Result<Bytes>>,
    running: Option<Workers>,
}

/// The channels to the worker threads, once they run.
struct Workers {
    jobs: SyncSender<Job>,
    order: SyncSender<Receiver<io::Result<Bytes>>>,
    recycled: Receiver<Vec<u8>>,
}

struct Job {
    data: Vec<u8>,
    len: usize,
    reply: SyncSender<io::Result<Bytes>>,
}

/// A pipeline that hands compressed output, in order, to `out`, with up to `workers`
/// compression threads. Memory in flight is bounded by the channel capacities: about
/// `4 * workers + 2` chunks.
pub(super) fn pipeline(
    workers: usize,
    out: tokio::sync::mpsc::Sender<io::Result<Bytes>>,
) -> Chunker {
    Chunker {
        buf: vec![0; CHUNK],
        len: 0,
        workers: workers.max(1),
        out,
        running: None,
    }
}

/// Starts the compression threads and the thread that emits their output in chunk order.
fn start_workers(workers: usize, out: tokio::sync::mpsc::Sender<io::Result<Bytes>>) -> Workers {
    let (jobs_tx, jobs_rx) = mpsc::sync_channel::<Job>(workers);
    let (order_tx, order_rx) = mpsc::sync_channel::<Receiver<io::Result<Bytes>>>(2 * workers);
    let (recycle_tx, recycle_rx) = mpsc::channel::<Vec<u8>>();
    let jobs_rx = Arc::new(Mutex::new(jobs_rx));
    for _ in 0..workers {
        let jobs = Arc::clone(&jobs_rx);
        let recycle = recycle_tx.clone();
        thread::spawn(move || compress_jobs(&jobs, &recycle));
    }
    thread::spawn(move || {
        for slot in order_rx {
            let chunk = slot
                .recv()
                .unwrap_or_else(|_| Err(io::Error::other("a compression worker stopped")));
            let failed = chunk.is_err();
            if out.blocking_send(chunk).is_err() || failed {
                break;
            }
        }
    });
    Workers {
        jobs: jobs_tx,
        order: order_tx,
        recycled: recycle_rx,
    }
}

fn compress_jobs(jobs: &Mutex<Receiver<Job>>, recycle: &mpsc::Sender<Vec<u8>>) {
    let mut compressor = Compressor::take();
    loop {
        let job = match jobs.lock() {
            Ok(rx) => rx.recv(),
            Err(poisoned) => poisoned.into_inner().recv(),
        };
        let Ok(job) = job else {
            compressor.give_back();
            return;
        };
        let result = compressor.gzip(&job.data[..job.len]);
        // The producer may already be gone; a lost buffer or reply is then harmless.
        let _ = recycle.send(job.data);
        let _ = job.reply.send(result);
    }
}

/// The consumer of the compressed stream went away, so nothing more can be written.
#[derive(Debug)]
pub(super) struct Closed;

/// What [`Chunker::fill_from`] read.
pub(super) struct Filled {
    /// Bytes appended.
    pub(super) bytes: u64,
    /// Why the reader stopped early, if it failed rather than ended.
    pub(super) error: Option<io::Error>,
}

impl Chunker {
    /// Appends `bytes` to the stream.
    pub(super) fn write(&mut self, mut bytes: &[u8]) -> Result<(), Closed> {
        while !bytes.is_empty() {
            let n = bytes.len().min(CHUNK - self.len);
            self.buf[self.len..self.len + n].copy_from_slice(&bytes[..n]);
            self.len += n;
            bytes = &bytes[n..];
            self.flush_if_full()?;
        }
        Ok(())
    }

    /// Appends `n` zero bytes.
    pub(super) fn zeros(&mut self, mut n: usize) -> Result<(), Closed> {
        while n > 0 {
            let k = n.min(CHUNK - self.len);
            self.buf[self.len..self.len + k].fill(0);
            self.len += k;
            n -= k;
            self.flush_if_full()?;
        }
        Ok(())
    }

    /// Appends up to `n` bytes read from `reader` straight into the chunk buffers (no
    /// intermediate copy), stopping early only if the reader ends or fails.
    pub(super) fn fill_from(&mut self, reader: &mut impl Read, n: u64) -> Result<Filled, Closed> {
        let mut bytes = 0u64;
        while bytes < n {
            let want = (n - bytes).min((CHUNK - self.len) as u64) as usize;
            let got = match reader.read(&mut self.buf[self.len..self.len + want]) {
                Ok(0) => break,
                Ok(got) => got,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Ok(Filled {
                        bytes,
                        error: Some(e),
                    });
                }
            };
            self.len += got;
            bytes += got as u64;
            self.flush_if_full()?;
        }
        Ok(Filled { bytes, error: None })
    }

    fn flush_if_full(&mut self) -> Result<(), Closed> {
        if self.len == CHUNK {
            self.send_chunk()?;
        }
        Ok(())
    }

    fn send_chunk(&mut self) -> Result<(), Closed> {
        let (workers, out) = (self.workers, &self.out);
        let running = self
            .running
            .get_or_insert_with(|| start_workers(workers, out.clone()));
        let fresh = running
            .recycled
            .try_recv()
            .unwrap_or_else(|_| vec![0; CHUNK]);
        let data = std::mem::replace(&mut self.buf, fresh);
        let len = std::mem::take(&mut self.len);
        let (reply, slot) = mpsc::sync_channel(1);
        running
            .jobs
            .send(Job { data, len, reply })
            .map_err(|_| Closed)?;
        running.order.send(slot).map_err(|_| Closed)
    }

    /// Ends the output stream with `error` instead of the rest of the archive.
    pub(super) fn abort(self, error: io::Error) {
        // The consumer may be gone already; then nobody needs to hear it.
        let _ = self.out.blocking_send(Err(error));
    }

    /// Sends the last partial chunk; the output stream ends once it is compressed.
    pub(super) fn finish(mut self) -> Result<(), Closed> {
        if self.running.is_none() {
            // Everything fit in one chunk: compress it here, the same bytes a worker would make.
            let mut compressor = Compressor::take();
            let member = compressor.gzip(&self.buf[..self.len]);
            compressor.give_back();
            return self.out.blocking_send(member).map_err(|_| Closed);
        }
        if self.len > 0 {
            self.send_chunk()?;
        }
        Ok(())
    }
}

/// Compresses one chunk at a time into gzip members.
struct Compressor {
    deflate: Compress,
}

/// Compressors set up earlier and idle now. Setting up a deflate state costs more than
/// compressing a small archive, and one process packs several archives (a run's results);
/// each member starts from a reset state, so a reused compressor writes the same bytes.
static IDLE: Mutex<Vec<Compressor>> = Mutex::new(Vec::new());
/// At most this many compressors are kept idle (a few hundred KiB each).
const MAX_IDLE: usize = 4;

impl Compressor {
    fn new() -> Compressor {
        Compressor {
            deflate: Compress::new(Compression::new(LEVEL), false),
        }
    }

    /// An idle compressor, or a new one.
    fn take() -> Compressor {
        IDLE.lock()
            .ok()
            .and_then(|mut idle| idle.pop())
            .unwrap_or_else(Compressor::new)
    }

    /// Keeps this compressor for the next [`Compressor::take`], unless enough are idle.
    fn give_back(self) {
        if let Ok(mut idle) = IDLE.lock()
            && idle.len() < MAX_IDLE
        {
            idle.push(self);
        }
    }

    /// `chunk` as gzip members: one per run of consecutive blocks of the same kind.
    fn gzip(&mut self, chunk: &[u8]) -> io::Result<Bytes> {
        // Room for the worst case (stored data plus framing) up front: growing by doubling
        // would leave most buffers half empty while they wait for the upload.
        let mut out = Vec::with_capacity(chunk.len() + chunk.len() / 256 + 8192);
        let mut start = 0;
        while start < chunk.len() {
            let store = incompressible(&chunk[start..(start + BLOCK).min(chunk.len())]);
            let mut end = (start + BLOCK).min(chunk.len());
            while end < chunk.len()
                && incompressible(&chunk[end..(end + BLOCK).min(chunk.len())]) == store
            {
                end = (end + BLOCK).min(chunk.len());
            }
            self.member(&chunk[start..end], store, &mut out)?;
            start = end;
        }
        Ok(Bytes::from(out))
    }

    fn member(&mut self, data: &[u8], store: bool, out: &mut Vec<u8>) -> io::Result<()> {
        out.extend_from_slice(&GZIP_HEADER);
        if store {
            write_stored(data, out);
        } else {
            self.deflate(data, out)?;
        }
        let mut crc = Crc::new();
        crc.update(data);
        out.extend_from_slice(&crc.sum().to_le_bytes());
        // ISIZE is the length modulo 2^32 by definition.
        out.extend_from_slice(&(data.len() as u32).to_le_bytes());
        Ok(())
    }

    fn deflate(&mut self, data: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        self.deflate.reset();
        let mut consumed = 0usize;
        loop {
            if out.capacity() - out.len() < 1024 {
                out.reserve_exact(64 * 1024);
            }
            let before = self.deflate.total_in();
            let status = self
                .deflate
                .compress_vec(&data[consumed..], out, FlushCompress::Finish)
                .map_err(io::Error::other)?;
            consumed += (self.deflate.total_in() - before) as usize;
            if status == Status::StreamEnd {
                return Ok(());
            }
        }
    }
}

/// Deflate stored blocks (RFC 1951 §3.2.4); the member starts byte-aligned, so each block
/// header is one byte holding BFINAL and BTYPE=00.
fn write_stored(data: &[u8], out: &mut Vec<u8>) {
    let mut pieces = data.chunks(MAX_STORED).peekable();
    while let Some(piece) = pieces.next() {
        out.push(u8::from(pieces.peek().is_none()));
        let len = piece.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(piece);
    }
}

/// Whether deflate would gain next to nothing on `block`, judged by its byte entropy.
fn incompressible(block: &[u8]) -> bool {
    // Small tails are cheap to deflate and their entropy estimate is unreliable.
    if block.len() < 4096 {
        return false;
    }
    // Four interleaved tables keep consecutive increments of the same counter apart.
    let mut counts = [[0u32; 256]; 4];
    let mut quads = block.chunks_exact(4);
    for q in &mut quads {
        counts[0][q[0] as usize] += 1;
        counts[1][q[1] as usize] += 1;
        counts[2][q[2] as usize] += 1;
        counts[3][q[3] as usize] += 1;
    }
    for &b in quads.remainder() {
        counts[0][b as usize] += 1;
    }
    let n = block.len() as f64;
    let sum_c_log_c: f64 = (0..256)
        .map(|i| f64::from(counts[0][i] + counts[1][i] + counts[2][i] + counts[3][i]))
        .filter(|&c| c > 0.0)
        .map(|c| c * c.log2())
        .sum();
    n.log2() - sum_c_log_c / n > STORE_ENTROPY
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::read::MultiGzDecoder;

    fn pseudo_random(n: usize, mut seed: u64) -> Vec<u8> {
        (0..n)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect()
    }

    fn gunzip(data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        MultiGzDecoder::new(data).read_to_end(&mut out).unwrap();
        out
    }

    #[test]
    fn random_blocks_are_stored_and_text_is_deflated() {
        let random = pseudo_random(3 * BLOCK, 7);
        let text: Vec<u8> = b"the quick brown fox jumps over the lazy dog\n"
            .iter()
            .copied()
            .cycle()
            .take(2 * BLOCK)
            .collect();
        assert!(incompressible(&random[..BLOCK]));
        assert!(!incompressible(&text[..BLOCK]));

        let mut chunk = text.clone();
        chunk.extend_from_slice(&random);
        chunk.extend_from_slice(&text[..1000]);
        let gz = Compressor::new().gzip(&chunk).unwrap();
        assert_eq!(gunzip(&gz), chunk);
        // Stored random data costs only framing; the text shrinks to almost nothing.
        assert!(gz.len() < random.len() + 4096, "{} bytes", gz.len());
        assert!(gz.len() > random.len());
    }

    #[test]
    fn stored_blocks_split_at_the_deflate_limit() {
        let data = pseudo_random(MAX_STORED * 2 + 10, 3);
        let mut out = GZIP_HEADER.to_vec();
        write_stored(&data, &mut out);
        let mut crc = Crc::new();
        crc.update(&data);
        out.extend_from_slice(&crc.sum().to_le_bytes());
        out.extend_from_slice(&(data.len() as u32).to_le_bytes());
        assert_eq!(gunzip(&out), data);
    }

    #[test]
    fn pipeline_output_is_in_order_and_deterministic() {
        let data = pseudo_random(3 * CHUNK + 12345, 11);
        let run = |workers| {
            let (tx, mut rx) = tokio::sync::mpsc::channel(2);
            let mut chunker = pipeline(workers, tx);
            let input = data.clone();
            let writer = thread::spawn(move || {
                chunker.write(&input[..100]).unwrap();
                chunker.fill_from(&mut &input[100..], u64::MAX).unwrap();
                chunker.finish().unwrap();
            });
            let mut out = Vec::new();
            while let Some(chunk) = rx.blocking_recv() {
                out.extend_from_slice(&chunk.unwrap());
            }
            writer.join().unwrap();
            out
        };
        let one = run(1);
        assert_eq!(gunzip(&one), data);
        assert_eq!(run(3), one);
    }
}

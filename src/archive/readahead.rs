//! A reader that runs another reader on its own thread, a few blocks ahead, so that producing
//! bytes (decompressing) and consuming them (writing files) use two cores, as `gzip -d | tar -x`
//! does. It seeks forward by skipping, which spares `tar` zeroing a 32 KiB buffer to skip
//! to each entry's header.

use std::io::{self, Read, Seek, SeekFrom};
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread;

/// Bytes read ahead per block.
const BLOCK: usize = 1024 * 1024;
/// Blocks buffered between the two threads.
const AHEAD: usize = 4;

/// The consuming end; dropping it stops the reading thread.
pub(super) struct ReadAhead {
    blocks: Receiver<io::Result<(Vec<u8>, usize)>>,
    recycle: Sender<Vec<u8>>,
    current: Vec<u8>,
    len: usize,
    pos: usize,
    done: bool,
    /// Bytes read or skipped so far.
    offset: u64,
}

impl ReadAhead {
    /// Starts reading `reader` on a new thread.
    pub(super) fn spawn(mut reader: impl Read + Send + 'static) -> ReadAhead {
        let (blocks_tx, blocks) = mpsc::sync_channel(AHEAD);
        let (recycle, recycled) = mpsc::channel::<Vec<u8>>();
        thread::spawn(move || {
            loop {
                let mut block = recycled.try_recv().unwrap_or_else(|_| vec![0; BLOCK]);
                let mut len = 0;
                let result = loop {
                    match reader.read(&mut block[len..]) {
                        Ok(0) => break Ok(()),
                        Ok(n) => {
                            len += n;
                            if len == BLOCK {
                                break Ok(());
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => break Err(e),
                    }
                };
                let last = len < BLOCK || result.is_err();
                let sent = match result {
                    Ok(()) => blocks_tx.send(Ok((block, len))),
                    Err(e) => blocks_tx.send(Err(e)),
                };
                if sent.is_err() || last {
                    return;
                }
            }
        });
        ReadAhead {
            blocks,
            recycle,
            current: Vec::new(),
            len: 0,
            pos: 0,
            done: false,
            offset: 0,
        }
    }

    /// The bytes not yet consumed of the current block, the next block once this one is used
    /// up; empty at the end.
    fn available(&mut self) -> io::Result<&[u8]> {
        while self.pos == self.len {
            if self.done {
                return Ok(&[]);
            }
            let (block, len) = match self.blocks.recv() {
                Ok(block) => block?,
                Err(_) => return Err(io::Error::other("the read-ahead thread stopped")),
            };
            let old = std::mem::replace(&mut self.current, block);
            if !old.is_empty() {
                // The reading thread may be gone already; then the buffer is just dropped.
                let _ = self.recycle.send(old);
            }
            self.done = len < BLOCK;
            self.len = len;
            self.pos = 0;
        }
        Ok(&self.current[self.pos..self.len])
    }

    fn consume(&mut self, n: usize) {
        self.pos += n;
        self.offset += n as u64;
    }
}

impl Read for ReadAhead {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let available = self.available()?;
        let n = buf.len().min(available.len());
        buf[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

/// Forward only, relative to the current position: skips bytes without copying them.
impl Seek for ReadAhead {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        let SeekFrom::Current(ahead @ 0..) = pos else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "a read-ahead stream only seeks forward",
            ));
        };
        let mut ahead = ahead as u64;
        while ahead > 0 {
            let available = self.available()?.len();
            if available == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "unexpected end of the archive while skipping",
                ));
            }
            let n = ahead.min(available as u64);
            self.consume(n as usize);
            ahead -= n;
        }
        Ok(self.offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_bytes_through_in_order() {
        let data: Vec<u8> = (0..3 * BLOCK + 17).map(|i| (i % 251) as u8).collect();
        let mut out = Vec::new();
        ReadAhead::spawn(io::Cursor::new(data.clone()))
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, data);
    }

    #[test]
    fn exact_multiple_of_block_ends() {
        let data = vec![7u8; 2 * BLOCK];
        let mut out = Vec::new();
        ReadAhead::spawn(io::Cursor::new(data.clone()))
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out.len(), data.len());
    }

    #[test]
    fn seeks_forward_across_blocks_and_not_back() {
        let data: Vec<u8> = (0..3 * BLOCK).map(|i| (i % 251) as u8).collect();
        let mut ahead = ReadAhead::spawn(io::Cursor::new(data.clone()));
        let mut byte = [0; 1];
        ahead.read_exact(&mut byte).unwrap();
        assert_eq!(ahead.stream_position().unwrap(), 1);
        let to = 2 * BLOCK as u64 + 5;
        assert_eq!(ahead.seek(SeekFrom::Current(to as i64 - 1)).unwrap(), to);
        ahead.read_exact(&mut byte).unwrap();
        assert_eq!(byte[0], data[to as usize]);
        assert!(ahead.seek(SeekFrom::Current(-1)).is_err());
        assert!(ahead.seek(SeekFrom::Start(0)).is_err());
        let err = ahead.seek(SeekFrom::Current(BLOCK as i64)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn errors_reach_the_reader() {
        struct Failing;
        impl Read for Failing {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                Err(io::Error::other("disk on fire"))
            }
        }
        let err = ReadAhead::spawn(Failing)
            .read_to_end(&mut Vec::new())
            .unwrap_err();
        assert_eq!(err.to_string(), "disk on fire");
    }
}

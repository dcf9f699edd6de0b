//! Byte chunks that arrive on a channel as one blocking reader, for the extraction and the check that run on their own threads while an async task feeds them.

use std::io::{self, Read};

use bytes::{Buf, Bytes};
use tokio::sync::mpsc;

/// Reads the chunks `chunks` delivers, in order, to the end of the channel (when every sender
/// is gone); a chunk that is an error ends the read with it.
pub struct ChunkReader {
    chunks: mpsc::Receiver<io::Result<Bytes>>,
    current: Bytes,
}

impl ChunkReader {
    /// A reader of what arrives on `chunks`.
    pub fn new(chunks: mpsc::Receiver<io::Result<Bytes>>) -> Self {
        ChunkReader {
            chunks,
            current: Bytes::new(),
        }
    }
}

impl Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.chunks.blocking_recv() {
                Some(chunk) => self.current = chunk?,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        self.current.advance(n);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_read_in_order_to_the_end_and_an_error_ends_the_read() {
        let (tx, rx) = mpsc::channel(4);
        tx.try_send(Ok(Bytes::from_static(b"ab"))).unwrap();
        tx.try_send(Ok(Bytes::new())).unwrap();
        tx.try_send(Ok(Bytes::from_static(b"cde"))).unwrap();
        drop(tx);
        let mut text = String::new();
        ChunkReader::new(rx).read_to_string(&mut text).unwrap();
        assert_eq!(text, "abcde");

        let (tx, rx) = mpsc::channel(4);
        tx.try_send(Ok(Bytes::from_static(b"ab"))).unwrap();
        tx.try_send(Err(io::Error::other("cut off"))).unwrap();
        let mut read = Vec::new();
        let error = ChunkReader::new(rx).read_to_end(&mut read).unwrap_err();
        assert_eq!(error.to_string(), "cut off");
    }
}

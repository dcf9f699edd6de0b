//! Bounded excerpts of an agent's output: which bytes of a stream to show, and how to carry them in JSON.
//!
//! Pure: the backends read the bytes [`ByteWindow::range`] asks for and [`Excerpt::of`] turns
//! them into the answer, so the same rules hold for a local log file and a pod's log.

use base64::Engine as _;
use schemars::JsonSchema;
use serde::Serialize;

/// The default `--max-bytes`: 64 KiB per stream.
pub const DEFAULT_MAX_BYTES: u64 = 64 * 1024;
/// The largest `--max-bytes`: one answer stays a size a caller can hold.
pub const MAX_MAX_BYTES: u64 = 16 * 1024 * 1024;

/// Which bytes of a stream a caller asks for: at most `max_bytes`, from `from` on, or the last
/// ones when `from` is not given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteWindow {
    /// At most this many bytes.
    pub max_bytes: u64,
    /// The first byte, when the caller continues from an earlier excerpt's `end`.
    pub from: Option<u64>,
}

impl Default for ByteWindow {
    fn default() -> Self {
        Self {
            max_bytes: DEFAULT_MAX_BYTES,
            from: None,
        }
    }
}

impl ByteWindow {
    /// The byte range `start..end` of a stream of `total` bytes this window covers.
    pub fn range(&self, total: u64) -> (u64, u64) {
        match self.from {
            Some(from) => {
                let start = from.min(total);
                (start, total.min(start.saturating_add(self.max_bytes)))
            }
            None => (total.saturating_sub(self.max_bytes), total),
        }
    }
}

/// How an excerpt's `data` is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// The bytes are UTF-8 text, as is.
    Utf8,
    /// The bytes are not UTF-8 (or a cut split a character); `data` is their standard base64.
    Base64,
}

/// Bytes `start..end` of a stream of `total_bytes`, as text or base64.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Excerpt {
    /// Offset of the first byte shown.
    pub start: u64,
    /// Offset just past the last byte shown: the `--from-byte` that continues from here.
    pub end: u64,
    /// Whether bytes of the stream lie outside `start..end`.
    pub truncated: bool,
    /// How `data` is written.
    pub encoding: Encoding,
    /// The bytes.
    pub data: String,
}

impl Excerpt {
    /// The excerpt of `bytes`, which sit at `start` in a stream of `total` bytes.
    pub fn of(bytes: &[u8], start: u64, total: u64) -> Self {
        let end = start + bytes.len() as u64;
        let (encoding, data) = match std::str::from_utf8(bytes) {
            Ok(text) => (Encoding::Utf8, text.to_owned()),
            Err(_) => (
                Encoding::Base64,
                base64::engine::general_purpose::STANDARD.encode(bytes),
            ),
        };
        Self {
            start,
            end,
            truncated: start > 0 || end < total,
            encoding,
            data,
        }
    }
}

/// One of the agent's output streams: its size and, when asked for, an excerpt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct StreamOutput {
    /// `stdout`, `stderr`, or `stdout+stderr` where the two reach one log (a pod's).
    pub stream: String,
    /// The stream's size in bytes so far, when known without reading it.
    pub total_bytes: Option<u64>,
    /// The bytes asked for (waiting answers only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub excerpt: Option<Excerpt>,
}

impl StreamOutput {
    /// The excerpt `window` takes from the whole of a stream held in memory.
    pub fn from_bytes(stream: &str, all: &[u8], window: ByteWindow) -> Self {
        let total = all.len() as u64;
        let (start, end) = window.range(total);
        // Offsets within `all`, which is in memory, so they fit a usize.
        let bytes = &all[start as usize..end as usize];
        Self {
            stream: stream.to_owned(),
            total_bytes: Some(total),
            excerpt: Some(Excerpt::of(bytes, start, total)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_takes_the_last_bytes_or_continues_from_an_offset() {
        let last = ByteWindow {
            max_bytes: 4,
            from: None,
        };
        assert_eq!(last.range(10), (6, 10));
        assert_eq!(last.range(3), (0, 3));
        let from = |from| ByteWindow {
            max_bytes: 4,
            from: Some(from),
        };
        assert_eq!(from(2).range(10), (2, 6));
        assert_eq!(from(8).range(10), (8, 10));
        assert_eq!(
            from(12).range(10),
            (10, 10),
            "past the end: nothing, at the end"
        );
    }

    #[test]
    fn an_excerpt_says_where_it_sits_and_how_it_is_written() {
        let text = StreamOutput::from_bytes(
            "stdout",
            b"hello world",
            ByteWindow {
                max_bytes: 5,
                from: None,
            },
        );
        assert_eq!(text.total_bytes, Some(11));
        let excerpt = text.excerpt.unwrap();
        assert_eq!(
            (excerpt.start, excerpt.end, excerpt.truncated),
            (6, 11, true)
        );
        assert_eq!(
            (excerpt.encoding, excerpt.data.as_str()),
            (Encoding::Utf8, "world")
        );

        let whole = Excerpt::of(b"hi", 0, 2);
        assert!(!whole.truncated);

        // A cut through a character, or bytes that are not text: base64.
        let cut = StreamOutput::from_bytes(
            "stdout",
            "é".as_bytes(),
            ByteWindow {
                max_bytes: 1,
                from: None,
            },
        );
        let excerpt = cut.excerpt.unwrap();
        assert_eq!(
            (excerpt.encoding, excerpt.data.as_str()),
            (Encoding::Base64, "qQ==")
        );
    }
}

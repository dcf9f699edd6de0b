//! The output-match watch of a running local execution: the new lines of its logs checked against the watches its record names, an event delivered for each match.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::notify::{OUTPUT_MATCHED, deliver};
use super::record::Records;
use crate::api::MatchedLine;

/// How often a running execution's new output is checked against its watches.
const MATCH_POLL: Duration = Duration::from_millis(250);
/// The most output-match events one run sends.
const MAX_MATCH_EVENTS: usize = 100;

/// Watches a running execution's output for the lines its watches (re-read from its record, so
/// that `notify set` on a running execution takes effect) match, and delivers an event for
/// each, keeping them in the record's events; runs until dropped.
pub async fn watch_output(records: Records, namespace: String, name: String, logs: [PathBuf; 2]) {
    let mut read = [0u64; 2];
    let mut partial = [String::new(), String::new()];
    let mut sent = 0usize;
    loop {
        tokio::time::sleep(MATCH_POLL).await;
        let Ok(record) = records.read(&namespace, &name) else {
            continue;
        };
        let Some(settings) = record.notify.clone() else {
            continue;
        };
        if settings.output_matches.is_empty() {
            continue;
        }
        for (index, stream) in ["stdout", "stderr"].into_iter().enumerate() {
            let lines = new_lines(&logs[index], &mut read[index], &mut partial[index]);
            for (start, line) in lines {
                for watch in &settings.output_matches {
                    let from = if index == 0 {
                        watch.stdout_from
                    } else {
                        watch.stderr_from
                    };
                    let wanted = watch.stream == "both" || watch.stream == stream;
                    if !wanted || start < from || !watch.matches(&line) || sent >= MAX_MATCH_EVENTS
                    {
                        continue;
                    }
                    sent += 1;
                    let matched = MatchedLine {
                        pattern: watch.pattern.clone(),
                        stream: stream.to_owned(),
                        line: line.clone(),
                    };
                    let mut event = record.notification(OUTPUT_MATCHED, Some(matched));
                    deliver(&settings, &mut event).await;
                    let _ = records.append_event(&namespace, &name, &event);
                }
            }
        }
    }
}

/// The complete lines added to `path` since `read`, each with the offset it starts at.
fn new_lines(path: &Path, read: &mut u64, partial: &mut String) -> Vec<(u64, String)> {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut file) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let mut bytes = Vec::new();
    if file.seek(SeekFrom::Start(*read)).is_err() || file.read_to_end(&mut bytes).is_err() {
        return Vec::new();
    }
    let mut lines = Vec::new();
    let mut start = *read - partial.len() as u64;
    let mut rest = &bytes[..];
    while let Some(end) = rest.iter().position(|b| *b == b'\n') {
        partial.push_str(&String::from_utf8_lossy(&rest[..end]));
        lines.push((start, std::mem::take(partial)));
        start = *read + (bytes.len() - rest.len() + end + 1) as u64;
        rest = &rest[end + 1..];
    }
    partial.push_str(&String::from_utf8_lossy(rest));
    *read += bytes.len() as u64;
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_lines_come_whole_with_their_offsets() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let (mut read, mut partial) = (0, String::new());
        std::fs::write(&path, "one\ntw").unwrap();
        assert_eq!(
            new_lines(&path, &mut read, &mut partial),
            [(0, "one".to_owned())]
        );
        std::fs::write(&path, "one\ntwo\nthree\n").unwrap();
        assert_eq!(
            new_lines(&path, &mut read, &mut partial),
            [(4, "two".to_owned()), (8, "three".to_owned())]
        );
        assert!(new_lines(&path, &mut read, &mut partial).is_empty());
    }
}

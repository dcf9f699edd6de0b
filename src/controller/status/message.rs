//! Status messages bounded to what a status should carry, keeping what happened and the end of stderr.

/// Longest status message; a failure's stderr tail is cut from its start to fit.
pub const MESSAGE_LIMIT: usize = 1536;

/// `what`, followed by the tail of the agent's stderr if there is one, bounded.
pub fn with_tail(what: &str, stderr: &str) -> String {
    let stderr = stderr.trim_end();
    if stderr.is_empty() {
        return what.to_owned();
    }
    bounded(&format!("{what}; stderr tail:\n{stderr}"))
}

/// `message` cut to [`MESSAGE_LIMIT`] bytes, keeping its start (what happened) and its end
/// (the last lines of stderr).
pub fn bounded(message: &str) -> String {
    if message.len() <= MESSAGE_LIMIT {
        return message.to_owned();
    }
    let head_end = floor_boundary(message, MESSAGE_LIMIT / 4);
    let tail_start = ceil_boundary(message, message.len() - (MESSAGE_LIMIT - head_end - 5));
    format!("{} ... {}", &message[..head_end], &message[tail_start..])
}

fn floor_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

//! How much of an object a download sends: all of it, nothing new (`If-None-Match`), or one byte range (`Range`, `If-Range`), so that a download cut off by the API server's request timeout resumes where it stopped.
//!
//! Pure. One range per request; a request for several gets the whole object, which RFC 9110
//! allows.

/// What to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// 200 with every byte.
    Full,
    /// 304: the client's copy is current.
    NotModified,
    /// 206 with bytes `start..=end`.
    Partial {
        /// First byte.
        start: u64,
        /// Last byte, inclusive.
        end: u64,
    },
    /// 416: the range starts past the end.
    Unsatisfiable,
}

/// What the request's conditional and range headers ask for.
#[derive(Clone, Copy, Debug, Default)]
pub struct Asked<'a> {
    /// `If-None-Match`.
    pub if_none_match: Option<&'a str>,
    /// `Range`.
    pub range: Option<&'a str>,
    /// `If-Range`.
    pub if_range: Option<&'a str>,
}

/// The entity tag of an object with this sha256.
pub fn etag(sha256: &str) -> String {
    format!("\"{sha256}\"")
}

fn same_tag(a: &str, b: &str) -> bool {
    a.trim().trim_start_matches("W/") == b.trim_start_matches("W/")
}

/// The plan for an object of `size` bytes whose entity tag is `tag` (unknown while a run
/// goes on).
pub fn plan(size: u64, tag: Option<&str>, asked: Asked<'_>) -> Plan {
    if let (Some(tag), Some(wanted)) = (tag, asked.if_none_match)
        && wanted
            .split(',')
            .any(|w| w.trim() == "*" || same_tag(w, tag))
    {
        return Plan::NotModified;
    }
    let Some(range) = asked.range.and_then(|r| r.trim().strip_prefix("bytes=")) else {
        return Plan::Full;
    };
    if let Some(condition) = asked.if_range
        && !tag.is_some_and(|tag| same_tag(condition, tag) && !condition.starts_with("W/"))
    {
        return Plan::Full;
    }
    if range.contains(',') {
        return Plan::Full;
    }
    let Some((first, last)) = range.split_once('-') else {
        return Plan::Full;
    };
    let number = |text: &str| text.trim().parse::<u64>().ok();
    let (start, end) = match (first.trim().is_empty(), number(first), number(last)) {
        // `bytes=-N`: the last N bytes.
        (true, _, Some(suffix)) if suffix > 0 => {
            (size.saturating_sub(suffix), size.saturating_sub(1))
        }
        (true, _, _) => return Plan::Full,
        (false, Some(start), None) if last.trim().is_empty() => (start, size.saturating_sub(1)),
        (false, Some(start), Some(end)) if end >= start => (start, end.min(size.saturating_sub(1))),
        _ => return Plan::Full,
    };
    if size == 0 || start >= size {
        return Plan::Unsatisfiable;
    }
    Plan::Partial { start, end }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranged(range: &str) -> Plan {
        plan(
            100,
            Some("\"abc\""),
            Asked {
                range: Some(range),
                ..Asked::default()
            },
        )
    }

    #[test]
    fn single_ranges_are_served_and_others_get_everything() {
        assert_eq!(ranged("bytes=0-9"), Plan::Partial { start: 0, end: 9 });
        assert_eq!(ranged("bytes=90-"), Plan::Partial { start: 90, end: 99 });
        assert_eq!(ranged("bytes=-10"), Plan::Partial { start: 90, end: 99 });
        assert_eq!(ranged("bytes=-1000"), Plan::Partial { start: 0, end: 99 });
        assert_eq!(
            ranged("bytes=50-1000"),
            Plan::Partial { start: 50, end: 99 }
        );
        assert_eq!(ranged("bytes=100-"), Plan::Unsatisfiable);
        for ignored in [
            "bytes=0-1,5-6",
            "items=0-1",
            "bytes=9-3",
            "bytes=x-",
            "bytes=-0",
            "bytes=-",
        ] {
            assert_eq!(ranged(ignored), Plan::Full, "{ignored}");
        }
        assert_eq!(plan(100, None, Asked::default()), Plan::Full);
    }

    #[test]
    fn conditions_follow_the_entity_tag() {
        let tag = etag("abc");
        assert_eq!(tag, "\"abc\"");
        let current = Asked {
            if_none_match: Some("\"old\", \"abc\""),
            ..Asked::default()
        };
        assert_eq!(plan(100, Some(&tag), current), Plan::NotModified);
        let resumed = Asked {
            range: Some("bytes=10-"),
            if_range: Some("\"abc\""),
            ..Asked::default()
        };
        assert_eq!(
            plan(100, Some(&tag), resumed),
            Plan::Partial { start: 10, end: 99 }
        );
        let changed = Asked {
            if_range: Some("\"other\""),
            ..resumed
        };
        assert_eq!(plan(100, Some(&tag), changed), Plan::Full);
        assert_eq!(
            plan(100, None, resumed),
            Plan::Full,
            "no tag yet: no resume"
        );
        assert_eq!(plan(100, None, current), Plan::Full);
    }
}

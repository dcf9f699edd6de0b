//! Execution tags: dot-separated names (`team.nightly`), their labels on a cluster, and the `list --tag` patterns that select them.

use std::collections::BTreeMap;

/// Label prefix of a tag: an execution tagged `a.b` carries the label `tag.errand.dev/a.b`.
pub const TAG_LABEL_PREFIX: &str = "tag.errand.dev/";
/// Label prefix of a tag's leading segments: `a.b.c` also carries `tag-prefix.errand.dev/a` and
/// `tag-prefix.errand.dev/a.b`, so that the pattern `a.*` is the label selector
/// `tag-prefix.errand.dev/a`.
pub const TAG_PREFIX_LABEL_PREFIX: &str = "tag-prefix.errand.dev/";
/// The longest tag: a label name holds 63 characters.
pub const MAX_TAG_LENGTH: usize = 63;
/// The most tags one execution carries.
pub const MAX_TAGS: usize = 16;

/// Why a tag, a list of tags or a tag pattern is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TagError {
    /// Empty, or longer than [`MAX_TAG_LENGTH`].
    #[error("{tag:?} is not a tag: it must have 1 to {MAX_TAG_LENGTH} characters")]
    Length {
        /// The tag.
        tag: String,
    },
    /// A segment that is not lowercase letters, digits and inner dashes.
    #[error(
        "{tag:?} is not a tag: segment {segment:?} must be lowercase letters, digits and inner '-' (segments are separated by '.')"
    )]
    Segment {
        /// The tag.
        tag: String,
        /// Its bad segment.
        segment: String,
    },
    /// More than [`MAX_TAGS`] distinct tags.
    #[error("{count} tags given; an execution carries at most {MAX_TAGS}")]
    TooMany {
        /// How many were given.
        count: usize,
    },
    /// A `list --tag` pattern whose tag is refused.
    #[error("pattern {pattern:?}: {reason}")]
    Pattern {
        /// The pattern.
        pattern: String,
        /// Why its tag is refused.
        reason: Box<TagError>,
    },
}

/// Checks one tag: dot-separated segments of lowercase letters, digits and inner dashes, at
/// most 63 characters, so that it is a label name as it stands.
pub fn check_tag(tag: &str) -> Result<(), TagError> {
    if tag.is_empty() || tag.len() > MAX_TAG_LENGTH {
        return Err(TagError::Length {
            tag: tag.to_owned(),
        });
    }
    let segment_ok = |s: &str| {
        let bytes = s.as_bytes();
        let inner = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-';
        let edge = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        edge(bytes.first()) && edge(bytes.last()) && bytes.iter().all(inner)
    };
    if let Some(bad) = tag.split('.').find(|s| !segment_ok(s)) {
        return Err(TagError::Segment {
            tag: tag.to_owned(),
            segment: bad.to_owned(),
        });
    }
    Ok(())
}

/// Checks every tag of a list, refuses duplicates and more than [`MAX_TAGS`]; returns them sorted.
pub fn check_tags(tags: &[String]) -> Result<Vec<String>, TagError> {
    let mut sorted = Vec::with_capacity(tags.len());
    for tag in tags {
        check_tag(tag)?;
        if !sorted.contains(tag) {
            sorted.push(tag.clone());
        }
    }
    if sorted.len() > MAX_TAGS {
        return Err(TagError::TooMany {
            count: sorted.len(),
        });
    }
    sorted.sort();
    Ok(sorted)
}

/// A `list --tag` pattern: a whole tag, or `prefix.*` for every tag under `prefix`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TagPattern {
    /// Exactly this tag.
    Exact(String),
    /// Every tag that starts with this prefix and a dot.
    Under(String),
}

impl TagPattern {
    /// Parses `tag` or `prefix.*`.
    pub fn parse(pattern: &str) -> Result<Self, TagError> {
        let refused = |reason| TagError::Pattern {
            pattern: pattern.to_owned(),
            reason: Box::new(reason),
        };
        match pattern.strip_suffix(".*") {
            Some(prefix) => check_tag(prefix)
                .map(|()| TagPattern::Under(prefix.to_owned()))
                .map_err(refused),
            None => check_tag(pattern)
                .map(|()| TagPattern::Exact(pattern.to_owned()))
                .map_err(refused),
        }
    }

    /// Whether an execution with these tags matches.
    pub fn matches(&self, tags: &[String]) -> bool {
        tags.iter().any(|tag| match self {
            TagPattern::Exact(want) => tag == want,
            TagPattern::Under(prefix) => tag
                .strip_prefix(prefix.as_str())
                .is_some_and(|rest| rest.starts_with('.')),
        })
    }

    /// The label selector requirement that selects the same executions on a cluster.
    pub fn selector(&self) -> String {
        match self {
            TagPattern::Exact(tag) => format!("{TAG_LABEL_PREFIX}{tag}"),
            TagPattern::Under(prefix) => format!("{TAG_PREFIX_LABEL_PREFIX}{prefix}"),
        }
    }
}

/// The labels that carry `tags` on a cluster (all with empty values).
pub fn tag_labels(tags: &[String]) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    for tag in tags {
        labels.insert(format!("{TAG_LABEL_PREFIX}{tag}"), String::new());
        let mut end = 0;
        while let Some(dot) = tag[end..].find('.') {
            end += dot;
            labels.insert(
                format!("{TAG_PREFIX_LABEL_PREFIX}{}", &tag[..end]),
                String::new(),
            );
            end += 1;
        }
    }
    labels
}

/// Whether a label is one of the tag labels ([`tag_labels`]).
pub fn is_tag_label(key: &str) -> bool {
    key.starts_with(TAG_LABEL_PREFIX) || key.starts_with(TAG_PREFIX_LABEL_PREFIX)
}

/// The tags an object's labels carry, sorted.
pub fn tags_of_labels(labels: &BTreeMap<String, String>) -> Vec<String> {
    labels
        .keys()
        .filter_map(|k| k.strip_prefix(TAG_LABEL_PREFIX))
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_dot_separated_label_safe_segments() {
        assert!(check_tag("team-a.nightly.v2").is_ok());
        assert_eq!(
            check_tag("Team").unwrap_err().to_string(),
            "\"Team\" is not a tag: segment \"Team\" must be lowercase letters, digits and inner '-' (segments are separated by '.')"
        );
        for bad in ["a..b", ".a", "a.", "-a", "a-", "a b", "a/b", "a_b", ""] {
            assert!(check_tag(bad).is_err(), "{bad:?}");
        }
        assert!(check_tag(&"a".repeat(64)).is_err());
        assert_eq!(
            check_tags(&["b".into(), "a".into(), "b".into()]).unwrap(),
            ["a", "b"]
        );
    }

    #[test]
    fn patterns_match_like_their_label_selectors() {
        let tags = vec!["team.nightly".to_owned(), "ci".to_owned()];
        let under = TagPattern::parse("team.*").unwrap();
        assert!(under.matches(&tags));
        assert!(!TagPattern::parse("tea.*").unwrap().matches(&tags));
        assert!(
            !TagPattern::parse("ci.*").unwrap().matches(&tags),
            "ci itself is not under ci"
        );
        assert!(TagPattern::parse("ci").unwrap().matches(&tags));
        assert_eq!(under.selector(), "tag-prefix.errand.dev/team");
        let labels = tag_labels(&["a.b.c".to_owned()]);
        assert_eq!(
            labels.keys().collect::<Vec<_>>(),
            [
                "tag-prefix.errand.dev/a",
                "tag-prefix.errand.dev/a.b",
                "tag.errand.dev/a.b.c"
            ]
        );
        assert_eq!(tags_of_labels(&labels), ["a.b.c"]);
        assert!(TagPattern::parse("a.*.b").is_err());
        assert!(TagPattern::parse("*").is_err());
    }
}

//! Parsing of the string references in a spec: `fileset[#path]` and `secret[#key]`, optionally `namespace/`-qualified.

/// A parsed `[namespace/]name[#fragment]` reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StringRef {
    /// The namespace, when the reference names one (only the referrer's own is allowed).
    pub namespace: Option<String>,
    /// The object name.
    pub name: String,
    /// What follows `#`: a path in a Fileset or a key in a Secret.
    pub fragment: Option<String>,
}

impl StringRef {
    /// Splits `[namespace/]name[#fragment]`. An empty fragment counts as none.
    pub fn parse(text: &str) -> Self {
        let (object, fragment) = match text.split_once('#') {
            Some((object, fragment)) => (object, Some(fragment).filter(|f| !f.is_empty())),
            None => (text, None),
        };
        let (namespace, name) = match object.split_once('/') {
            Some((namespace, name)) => (Some(namespace.to_owned()), name),
            None => (None, object),
        };
        Self {
            namespace,
            name: name.to_owned(),
            fragment: fragment.map(str::to_owned),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        assert_eq!(
            StringRef::parse("repo#src/"),
            StringRef {
                namespace: None,
                name: "repo".into(),
                fragment: Some("src/".into())
            }
        );
        assert_eq!(
            StringRef::parse("other/creds#token"),
            StringRef {
                namespace: Some("other".into()),
                name: "creds".into(),
                fragment: Some("token".into())
            }
        );
        assert_eq!(
            StringRef::parse("plain#"),
            StringRef {
                namespace: None,
                name: "plain".into(),
                fragment: None
            }
        );
    }
}

//! Where the symbolic links of a tree lead: each link is resolved once, over a memoized view of the tree, so checking every link of a tree costs time linear in the total length of their targets (a walk per link, as the kernel does, costs the length of the whole chain behind each link).

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// Names come from the archive: a randomly seeded hash, many times faster than SipHash on the
/// short names a path is made of; no hash value is ever shown to the archive's author.
type HashMap<K, V> = foldhash::HashMap<K, V>;

/// Symbolic links followed in one resolution, as Linux's own limit (`MAXSYMLINKS`).
const MAX_LINK_HOPS: u32 = 40;

/// What stands at a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A directory.
    Dir,
    /// A symbolic link and its target.
    Link(Vec<u8>),
    /// Anything else (a file, a device).
    Other,
    /// Nothing.
    Missing,
}

/// Read access to the tree whose links are checked, by path relative to its root. Paths asked
/// for never pass through a symbolic link: the check substitutes each link's resolution.
pub trait TreeView {
    /// What stands at `path`, without following a link there.
    fn kind(&mut self, path: &std::path::Path) -> io::Result<Kind>;
}

/// Why a symbolic link of the tree is refused (each names the link by its path), or why the
/// tree could not be read to tell.
#[derive(Debug, thiserror::Error)]
pub enum UnsafeLink {
    /// Resolving the link comes back to it.
    #[error("symbolic link {} is part of a loop of links", .0.display())]
    Loop(PathBuf),
    /// More than [`MAX_LINK_HOPS`] links to follow.
    #[error("symbolic link {} has too many levels of links", .0.display())]
    TooManyLevels(PathBuf),
    /// The link leads above the root.
    #[error("symbolic link {} resolves outside the extraction root", .0.display())]
    LeadsOutside(PathBuf),
    /// The tree could not be read.
    #[error(transparent)]
    Read(#[from] io::Error),
}

const ROOT: usize = 0;

struct Node {
    parent: usize,
    name: OsString,
    children: HashMap<OsString, usize>,
    kind: Option<Kind>,
    resolution: Resolution,
}

#[derive(Clone, Copy)]
enum Resolution {
    Unknown,
    InProgress,
    /// Where the link leads (a node that is not a link) and how many links that took.
    Leads {
        to: usize,
        hops: u32,
    },
}

/// Checks links of one tree; remembers what it learned between checks.
pub struct LinkCheck<V> {
    view: V,
    nodes: Vec<Node>,
    /// The node [`LinkCheck::child`] found last: targets like `d/../d/..` ask for it again.
    last: usize,
}

impl<V: TreeView> LinkCheck<V> {
    /// A check over `view`, which is read lazily, each path at most once.
    pub fn new(view: V) -> Self {
        LinkCheck {
            view,
            nodes: vec![Node {
                parent: ROOT,
                name: OsString::new(),
                children: HashMap::default(),
                kind: Some(Kind::Dir),
                resolution: Resolution::Unknown,
            }],
            last: ROOT,
        }
    }

    /// Fails when the link at `link` (if a link still stands there) resolves outside the root or
    /// through more than 40 links. A dangling link passes: it leads nowhere.
    pub fn check(&mut self, link: &[OsString]) -> Result<(), UnsafeLink> {
        let mut node = ROOT;
        for part in link {
            node = self.child(node, part);
        }
        match self.kind(node)? {
            Kind::Link(target) => self.resolve(node, &target, 0).map(drop),
            _ => Ok(()),
        }
    }

    fn child(&mut self, parent: usize, name: &OsStr) -> usize {
        let last = &self.nodes[self.last];
        if self.last != ROOT && last.parent == parent && last.name == name {
            return self.last;
        }
        if let Some(&child) = self.nodes[parent].children.get(name) {
            self.last = child;
            return child;
        }
        // Below anything but a directory nothing can exist.
        let inherited = match self.nodes[parent].kind {
            Some(Kind::Dir) => None,
            Some(_) => Some(Kind::Missing),
            None => None,
        };
        let id = self.nodes.len();
        self.nodes.push(Node {
            parent,
            name: name.to_owned(),
            children: HashMap::default(),
            kind: inherited,
            resolution: Resolution::Unknown,
        });
        self.nodes[parent].children.insert(name.to_owned(), id);
        self.last = id;
        id
    }

    fn path(&self, mut node: usize) -> PathBuf {
        let mut names = Vec::new();
        while node != ROOT {
            names.push(&self.nodes[node].name);
            node = self.nodes[node].parent;
        }
        names.into_iter().rev().collect()
    }

    fn kind(&mut self, node: usize) -> io::Result<Kind> {
        if let Some(kind) = &self.nodes[node].kind {
            return Ok(kind.clone());
        }
        let parent = self.nodes[node].parent;
        if parent != ROOT && !matches!(self.kind(parent)?, Kind::Dir) {
            self.nodes[node].kind = Some(Kind::Missing);
            return Ok(Kind::Missing);
        }
        let kind = self.view.kind(&self.path(node))?;
        self.nodes[node].kind = Some(kind.clone());
        Ok(kind)
    }

    /// Where the link at `node` with `target` leads; `nesting` counts the links whose
    /// resolution is waiting for this one, which bounds the recursion.
    fn resolve(
        &mut self,
        node: usize,
        target: &[u8],
        nesting: u32,
    ) -> Result<(usize, u32), UnsafeLink> {
        match self.nodes[node].resolution {
            Resolution::Leads { to, hops } => return Ok((to, hops)),
            Resolution::InProgress => return Err(UnsafeLink::Loop(self.path(node))),
            Resolution::Unknown => {}
        }
        if nesting >= MAX_LINK_HOPS {
            return Err(UnsafeLink::TooManyLevels(self.path(node)));
        }
        self.nodes[node].resolution = Resolution::InProgress;
        let mut here = self.nodes[node].parent;
        let mut hops = 1;
        for part in target.split(|&b| b == b'/') {
            match part {
                b"" | b"." => {}
                b".." if here == ROOT => return Err(UnsafeLink::LeadsOutside(self.path(node))),
                b".." => here = self.nodes[here].parent,
                name => {
                    let child = self.child(here, OsStr::from_bytes(name));
                    // What is known already is not looked up again.
                    here = match (&self.nodes[child].kind, self.nodes[child].resolution) {
                        (Some(Kind::Dir), _) => child,
                        (
                            _,
                            Resolution::Leads {
                                to,
                                hops: inner_hops,
                            },
                        ) => {
                            hops += inner_hops;
                            to
                        }
                        _ => match self.kind(child)? {
                            Kind::Link(inner) => {
                                let (to, inner_hops) = self.resolve(child, &inner, nesting + 1)?;
                                hops += inner_hops;
                                to
                            }
                            _ => child,
                        },
                    };
                    if hops > MAX_LINK_HOPS {
                        return Err(UnsafeLink::TooManyLevels(self.path(node)));
                    }
                }
            }
        }
        self.nodes[node].resolution = Resolution::Leads { to: here, hops };
        Ok((here, hops))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::path::Path;

    /// A tree in memory that counts how often it is read.
    #[derive(Default)]
    struct Memory {
        entries: BTreeMap<PathBuf, Kind>,
        reads: usize,
    }

    impl Memory {
        fn with(mut self, path: &str, kind: Kind) -> Self {
            self.entries.insert(PathBuf::from(path), kind);
            self
        }
    }

    impl TreeView for &mut Memory {
        fn kind(&mut self, path: &Path) -> io::Result<Kind> {
            self.reads += 1;
            Ok(self.entries.get(path).cloned().unwrap_or(Kind::Missing))
        }
    }

    fn link(target: &str) -> Kind {
        Kind::Link(target.as_bytes().to_vec())
    }

    fn parts(path: &str) -> Vec<OsString> {
        path.split('/').map(OsString::from).collect()
    }

    #[test]
    fn links_inside_pass_and_chains_leading_out_fail() {
        let mut tree = Memory::default()
            .with("a", Kind::Dir)
            .with("a/l", link(".."))
            .with("a/l2", link("l/.."))
            .with("a/ok", link("l/a"))
            .with("dangling", link("nowhere/../x"));
        let mut check = LinkCheck::new(&mut tree);
        check.check(&parts("a/l")).unwrap();
        check.check(&parts("a/ok")).unwrap();
        check.check(&parts("dangling")).unwrap();
        let err = check.check(&parts("a/l2")).unwrap_err().to_string();
        assert!(err.contains("a/l2 resolves outside"), "{err}");
    }

    #[test]
    fn loops_and_long_chains_fail() {
        let mut tree = Memory::default().with("x", link("y")).with("y", link("x"));
        let err = LinkCheck::new(&mut tree)
            .check(&parts("x"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("loop"), "{err}");

        let mut tree = Memory::default().with("l0", Kind::Dir);
        for i in 1..=45 {
            tree = tree.with(&format!("l{i}"), link(&format!("l{}", i - 1)));
        }
        let mut check = LinkCheck::new(&mut tree);
        check.check(&parts("l40")).unwrap();
        let err = check.check(&parts("l45")).unwrap_err().to_string();
        assert!(err.contains("too many levels"), "{err}");
    }

    #[test]
    fn a_path_that_is_no_longer_a_link_is_skipped() {
        let mut tree = Memory::default().with("settings.json", Kind::Other);
        LinkCheck::new(&mut tree)
            .check(&parts("settings.json"))
            .unwrap();
    }

    #[test]
    fn each_path_is_read_once_however_many_links_share_a_chain() {
        // The adversarial shape: a chain of links with long `d/../d/..` targets, and many links
        // to its head. Each path is read once and each target walked once.
        let detour = "d/../".repeat(700);
        let mut tree = Memory::default().with("d", Kind::Dir).with("c0", Kind::Dir);
        for i in 1..=39 {
            tree = tree.with(&format!("c{i}"), link(&format!("{detour}c{}", i - 1)));
        }
        for i in 0..1000 {
            tree = tree.with(&format!("h{i}"), link(&format!("{detour}c39")));
        }
        let mut check = LinkCheck::new(&mut tree);
        for i in 0..1000 {
            check.check(&parts(&format!("h{i}"))).unwrap();
        }
        drop(check);
        assert!(tree.reads <= 1045, "{} reads", tree.reads);
    }
}

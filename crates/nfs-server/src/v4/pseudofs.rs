//! The NFSv4 pseudo file system (RFC 8881 §7.3 "Server Pseudo File
//! System", §7.2 "Browsing Exports", §7.7 "Mount Point Crossing", §7.8
//! "Security Policy and Namespace Presentation"): read-only junction
//! directories, built from the
//! export paths, that join every export into one namespace under the
//! root file handle (PUTROOTFH), as the Linux server (without `fsid=0`)
//! and NFS-Ganesha present it.
//!
//! Sans-IO: a tree computed once from the list of export paths, asked
//! which children a client may see and where a name leads. The file
//! handles, attributes and access decisions around it live in
//! [`super::namespace`].
//!
//! - One node per directory on the way to an export, the root `/`
//!   included; the node of an export's own path is its mount point (the
//!   export's root is "mounted on" it: its file id is the root's
//!   `mounted_on_fileid`, RFC 8881 §5.8.2.19).
//! - A node's file id is a hash of its path, its change attribute a hash
//!   of its children: both are the same after a restart with the same
//!   exports, and change when the exports under a node do.
//! - What a client sees depends on which exports list it (exports(5)
//!   client lists): a child is visible when an export it may use is at
//!   or below it, and leads into the export when the child is the mount
//!   point of one it may use, else to the junction. As on the Linux server
//!   (nfs-utils `v4root.c` makes the pseudo exports per client; knfsd's
//!   `nfsd4_encode_dirent` leaves out entries that cross into nothing the
//!   client may use), an export a client may not use is absent: LOOKUP
//!   answers NFS4ERR_NOENT and READDIR leaves it out.
//! - An export below another export's path is reached through the pseudo
//!   file system only by clients the upper export does not list; for the
//!   others, the name inside the upper export is that export's own
//!   directory (the Linux server's default `hide`).

use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use bytes::Bytes;

use crate::fh::fnv1a;

/// READDIR cookies 0, 1 and 2 are reserved (RFC 8881 §18.23.3); entry
/// `i` of a junction has cookie `i + COOKIE_BASE`.
pub(crate) const COOKIE_BASE: u64 = 3;

/// One directory of the pseudo file system.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    /// Its name in its parent (empty for the root).
    pub(crate) name: Bytes,
    /// The parent node (none for the root).
    pub(crate) parent: Option<usize>,
    /// File id: a hash of the path.
    pub(crate) fileid: u64,
    /// Child nodes, sorted by name.
    pub(crate) children: Vec<usize>,
    /// The export whose path this is, if any.
    pub(crate) export: Option<usize>,
    /// Every export at or below this node.
    pub(crate) below: Vec<usize>,
    /// Change attribute: a hash of the children's names and exports.
    pub(crate) change: u64,
}

impl Node {
    fn below_add(&mut self, e: usize) {
        if !self.below.contains(&e) {
            self.below.push(e);
        }
    }
}

/// Where a name in a junction leads a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Into export `.0` (its root directory).
    Export(usize),
    /// To junction node `.0`.
    Junction(usize),
}

/// The tree of junctions over a list of export paths.
#[derive(Debug, Clone)]
pub(crate) struct Tree {
    nodes: Vec<Node>,
}

/// The node id of the root.
pub(crate) const ROOT: usize = 0;

impl Tree {
    /// The tree over `paths` (absolute; export `i` is `paths[i]`).
    /// Components other than plain names (`.`, `..`) are skipped.
    #[cfg(test)]
    pub(crate) fn new(paths: &[&Path]) -> Self {
        let pairs: Vec<(usize, &Path)> = paths.iter().copied().enumerate().collect();
        Self::with_names(&pairs)
    }

    /// The tree over `(export, path)` pairs: an export may be at several
    /// paths (its canonical path first, then its aliases); the first
    /// pair naming a path wins it.
    pub(crate) fn with_names(paths: &[(usize, &Path)]) -> Self {
        let mut t = Tree {
            nodes: vec![Node {
                name: Bytes::new(),
                parent: None,
                fileid: 0,
                children: Vec::new(),
                export: None,
                below: Vec::new(),
                change: 0,
            }],
        };
        for &(i, p) in paths {
            let mut at = ROOT;
            t.nodes[at].below_add(i);
            for c in p.components() {
                let Component::Normal(name) = c else {
                    continue;
                };
                at = t.child_or_new(at, name.as_bytes());
                t.nodes[at].below_add(i);
            }
            if t.nodes[at].export.is_none() {
                t.nodes[at].export = Some(i);
            }
        }
        t.finish();
        t
    }

    fn child_or_new(&mut self, at: usize, name: &[u8]) -> usize {
        if let Some(c) = self.child(at, name) {
            return c;
        }
        let id = self.nodes.len();
        self.nodes.push(Node {
            name: Bytes::copy_from_slice(name),
            parent: Some(at),
            fileid: 0,
            children: Vec::new(),
            export: None,
            below: Vec::new(),
            change: 0,
        });
        let kids = &self.nodes[at].children;
        let pos = kids.partition_point(|&k| self.nodes[k].name[..] < *name);
        self.nodes[at].children.insert(pos, id);
        id
    }

    /// File ids from paths (unique within the tree), change attributes
    /// from children.
    fn finish(&mut self) {
        let mut seen = std::collections::HashSet::new();
        for i in 0..self.nodes.len() {
            let path = self.path(i);
            let mut id = fnv1a(&[b"nfsrdma pseudo fs ", &path]).max(2);
            while !seen.insert(id) {
                id = id.wrapping_add(1).max(2);
            }
            self.nodes[i].fileid = id;
        }
        for i in 0..self.nodes.len() {
            let mut parts: Vec<Vec<u8>> = vec![self.nodes[i].fileid.to_be_bytes().to_vec()];
            for &c in &self.nodes[i].children {
                let n = &self.nodes[c];
                parts.push(n.name.to_vec());
                parts.push(n.below.iter().flat_map(|e| e.to_be_bytes()).collect());
            }
            let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
            self.nodes[i].change = fnv1a(&refs).max(1);
        }
    }

    /// The node's absolute path as bytes (`/` for the root).
    pub(crate) fn path(&self, n: usize) -> Vec<u8> {
        let mut names = Vec::new();
        let mut at = Some(n);
        while let Some(i) = at {
            if i != ROOT {
                names.push(self.nodes[i].name.clone());
            }
            at = self.nodes[i].parent;
        }
        let mut out = Vec::new();
        for name in names.iter().rev() {
            out.push(b'/');
            out.extend_from_slice(name);
        }
        if out.is_empty() {
            out.push(b'/');
        }
        out
    }

    /// Node `n`.
    pub(crate) fn node(&self, n: usize) -> &Node {
        &self.nodes[n]
    }

    /// The node with file id `fileid`.
    pub(crate) fn by_fileid(&self, fileid: u64) -> Option<usize> {
        self.nodes.iter().position(|n| n.fileid == fileid)
    }

    /// The child of `n` called `name`.
    pub(crate) fn child(&self, n: usize, name: &[u8]) -> Option<usize> {
        let kids = &self.nodes[n].children;
        kids.binary_search_by(|&k| self.nodes[k].name[..].cmp(name))
            .ok()
            .map(|i| kids[i])
    }

    /// The mount point of export `e` (at its first path).
    pub(crate) fn mount_of(&self, e: usize) -> Option<usize> {
        self.nodes.iter().position(|n| n.export == Some(e))
    }

    /// Whether a client that may use the exports `allowed` says yes to
    /// sees node `n`.
    pub(crate) fn visible(&self, n: usize, allowed: &impl Fn(usize) -> bool) -> bool {
        self.nodes[n].below.iter().any(|&e| allowed(e))
    }

    /// Where node `n` leads such a client: into its export, to the
    /// junction, or nowhere (not visible).
    pub(crate) fn enter(&self, n: usize, allowed: &impl Fn(usize) -> bool) -> Option<Step> {
        match self.nodes[n].export {
            Some(e) if allowed(e) => Some(Step::Export(e)),
            _ if self.visible(n, allowed) => Some(Step::Junction(n)),
            _ => None,
        }
    }

    /// Where `name` in junction `n` leads such a client.
    pub(crate) fn step(
        &self,
        n: usize,
        name: &[u8],
        allowed: &impl Fn(usize) -> bool,
    ) -> Option<(usize, Step)> {
        let c = self.child(n, name)?;
        self.enter(c, allowed).map(|s| (c, s))
    }

    /// The children of `n` such a client sees, after READDIR cookie
    /// `cookie` (0: from the start), each with its cookie.
    pub(crate) fn list<'a>(
        &'a self,
        n: usize,
        cookie: u64,
        allowed: &'a impl Fn(usize) -> bool,
    ) -> impl Iterator<Item = (u64, usize)> + 'a {
        let skip = cookie.saturating_sub(COOKIE_BASE - 1);
        let skip = if cookie == 0 { 0 } else { skip };
        self.nodes[n]
            .children
            .iter()
            .enumerate()
            .map(|(i, &c)| (i as u64 + COOKIE_BASE, c))
            .skip(usize::try_from(skip).unwrap_or(usize::MAX))
            .filter(move |&(_, c)| self.visible(c, allowed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> Tree {
        Tree::new(&[Path::new("/a/b"), Path::new("/a/c"), Path::new("/srv/x/y")])
    }

    fn names(t: &Tree, n: usize, cookie: u64, ok: &impl Fn(usize) -> bool) -> Vec<String> {
        t.list(n, cookie, ok)
            .map(|(_, c)| String::from_utf8_lossy(&t.node(c).name).into_owned())
            .collect()
    }

    #[test]
    fn junctions_lead_to_every_export() {
        let t = tree();
        let all = |_: usize| true;
        assert_eq!(names(&t, ROOT, 0, &all), ["a", "srv"]);
        let (a, s) = t.step(ROOT, b"a", &all).unwrap();
        assert_eq!(s, Step::Junction(a));
        assert_eq!(names(&t, a, 0, &all), ["b", "c"]);
        assert_eq!(t.step(a, b"b", &all).map(|x| x.1), Some(Step::Export(0)));
        assert_eq!(t.step(a, b"c", &all).map(|x| x.1), Some(Step::Export(1)));
        assert_eq!(t.step(a, b"d", &all), None);
        assert_eq!(t.path(t.mount_of(2).unwrap()), b"/srv/x/y");
        assert_eq!(t.node(t.mount_of(0).unwrap()).parent, Some(a));
    }

    #[test]
    fn a_client_sees_only_what_leads_to_its_exports() {
        let t = tree();
        let only_c = |e: usize| e == 1;
        assert_eq!(names(&t, ROOT, 0, &only_c), ["a"]);
        let (a, _) = t.step(ROOT, b"a", &only_c).unwrap();
        assert_eq!(names(&t, a, 0, &only_c), ["c"]);
        assert_eq!(t.step(a, b"b", &only_c), None);
        assert_eq!(t.step(ROOT, b"srv", &only_c), None);
        let none = |_: usize| false;
        assert!(!t.visible(ROOT, &none));
        assert_eq!(t.enter(ROOT, &none), None);
    }

    #[test]
    fn ids_are_stable_and_distinct_and_cookies_resume() {
        let (t, u) = (tree(), tree());
        let ids: Vec<u64> = (0..t.nodes.len()).map(|n| t.node(n).fileid).collect();
        let again: Vec<u64> = (0..u.nodes.len()).map(|n| u.node(n).fileid).collect();
        assert_eq!(ids, again);
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), ids.len());
        assert_eq!(t.node(ROOT).change, u.node(ROOT).change);
        let other = Tree::new(&[Path::new("/a/b")]);
        assert_ne!(t.node(ROOT).change, other.node(ROOT).change);
        let all = |_: usize| true;
        let first: Vec<_> = t.list(ROOT, 0, &all).collect();
        assert_eq!(first[0].0, COOKIE_BASE);
        assert_eq!(names(&t, ROOT, first[0].0, &all), ["srv"]);
        assert_eq!(names(&t, ROOT, first[1].0, &all), Vec::<String>::new());
    }

    #[test]
    fn an_alias_is_a_second_way_into_the_same_export() {
        let t = Tree::with_names(&[
            (0, Path::new("/srv/data")),
            (0, Path::new("/export")),
            (1, Path::new("/srv/pub")),
        ]);
        let all = |_: usize| true;
        assert_eq!(names(&t, ROOT, 0, &all), ["export", "srv"]);
        assert_eq!(
            t.step(ROOT, b"export", &all).map(|x| x.1),
            Some(Step::Export(0))
        );
        let (srv, _) = t.step(ROOT, b"srv", &all).unwrap();
        assert_eq!(
            t.step(srv, b"data", &all).map(|x| x.1),
            Some(Step::Export(0))
        );
        assert_eq!(t.path(t.mount_of(0).unwrap()), b"/srv/data");
        assert_eq!(t.node(ROOT).below, [0, 1]);
    }

    #[test]
    fn the_export_of_slash_is_the_root() {
        let t = Tree::new(&[Path::new("/"), Path::new("/srv/x")]);
        let all = |_: usize| true;
        assert_eq!(t.enter(ROOT, &all), Some(Step::Export(0)));
        // A client only the second export lists gets the junctions.
        let second = |e: usize| e == 1;
        assert_eq!(t.enter(ROOT, &second), Some(Step::Junction(ROOT)));
        assert_eq!(names(&t, ROOT, 0, &second), ["srv"]);
    }
}

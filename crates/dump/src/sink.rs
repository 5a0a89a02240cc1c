//! Where decoders put their lines and counts.

use std::collections::{BTreeMap, VecDeque};

use crate::report::{Dir, Line, Verdict};

/// Lines waiting to be polled, global counts and the unknown/malformed
/// frame tallies (each frame counted once however many lines flag it).
#[derive(Debug, Default)]
pub(crate) struct Sink {
    /// The frame being decoded.
    pub(crate) frame: u64,
    pub(crate) lines: VecDeque<Line>,
    pub(crate) counts: BTreeMap<String, u64>,
    pub(crate) unknown: u64,
    pub(crate) malformed: u64,
    last_unknown: u64,
    last_malformed: u64,
}

impl Sink {
    pub(crate) fn line(&mut self, conn: usize, dir: Option<Dir>, verdict: Verdict, text: String) {
        match verdict {
            Verdict::Ok => {}
            Verdict::Unknown => {
                if self.last_unknown != self.frame {
                    self.last_unknown = self.frame;
                    self.unknown += 1;
                }
            }
            Verdict::Malformed => {
                if self.last_malformed != self.frame {
                    self.last_malformed = self.frame;
                    self.malformed += 1;
                }
            }
        }
        self.lines.push_back(Line {
            frame: self.frame,
            conn,
            dir,
            verdict,
            text,
        });
    }

    pub(crate) fn count(&mut self, what: impl Into<String>) {
        *self.counts.entry(what.into()).or_default() += 1;
    }
}

/// A connection's handle on the sink: its number and direction.
pub(crate) struct Out<'a> {
    pub(crate) sink: &'a mut Sink,
    pub(crate) conn: usize,
    pub(crate) dir: Dir,
}

impl Out<'_> {
    pub(crate) fn ok(&mut self, text: String) {
        self.sink.line(self.conn, Some(self.dir), Verdict::Ok, text);
    }

    pub(crate) fn unknown(&mut self, text: String) {
        self.sink
            .line(self.conn, Some(self.dir), Verdict::Unknown, text);
    }

    pub(crate) fn malformed(&mut self, text: String) {
        self.sink
            .line(self.conn, Some(self.dir), Verdict::Malformed, text);
    }

    pub(crate) fn count(&mut self, what: impl Into<String>) {
        self.sink.count(what);
    }

    pub(crate) fn with_dir(&mut self, dir: Dir) -> Out<'_> {
        Out {
            sink: self.sink,
            conn: self.conn,
            dir,
        }
    }
}

//! `verify`: re-reads every committed frame (CRC, LSN sequence, body),
//! every segment header and footer, and recomputes the hash chain,
//! listing every problem rather than stopping at the first.

use std::fmt;
use std::path::{Path, PathBuf};

use cairn_codec::frame::ChainForm;
use cairn_codec::segment::{SegmentFooter, SegmentHeader, SEGMENT_FOOTER_LEN, SEGMENT_HEADER_LEN};
use cairn_codec::{ChainHash, CodecError, Event, Lsn};

use super::dict::LogDicts;
use super::recovery::{Reached, TailState};
use super::scan::{walk, Step};
use super::view::View;
use super::Head;
use crate::{EngineError, Result};

/// What [`Log::verify`](super::Log::verify) found.
#[derive(Clone, Debug, PartialEq)]
pub struct VerifyReport {
    /// Segment files checked.
    pub segments: u64,
    /// Records whose frames were read.
    pub records: u64,
    /// Bytes of segment data checked.
    pub bytes: u64,
    /// The last record and the chain value recomputed over every record.
    pub head: Head,
    /// Every problem found, in log order; empty when the log is intact.
    pub problems: Vec<Problem>,
}

impl VerifyReport {
    /// True if no problem was found.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// One problem found by verify: where it is and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The segment file.
    pub path: PathBuf,
    /// Byte offset in that file.
    pub offset: u64,
    /// The LSN expected there, if known.
    pub lsn: Option<Lsn>,
    /// What is wrong.
    pub detail: String,
    /// When the problem is records that need a zstd dictionary that is
    /// missing or damaged: that dictionary's file. The records themselves
    /// are intact; restoring the file repairs them (and `salvage` refuses
    /// to run until then, as it would drop them).
    pub missing_dictionary: Option<PathBuf>,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {}", self.path.display(), self.offset)?;
        if let Some(l) = self.lsn {
            write!(f, " (LSN {l})")?;
        }
        write!(f, ": {}", self.detail)
    }
}

impl From<Problem> for EngineError {
    fn from(p: Problem) -> EngineError {
        EngineError::Corrupt {
            path: p.path,
            offset: p.offset,
            lsn: p.lsn,
            detail: p.detail,
        }
    }
}

/// Records of one segment whose dictionary is missing or damaged, reported
/// as one problem.
struct MissingDict {
    /// Index of the problem in the report.
    at: usize,
    id: u32,
    first: Lsn,
    last: Lsn,
    count: u64,
    /// What is wrong with the dictionary file.
    diagnosis: String,
}

impl MissingDict {
    fn detail(&self) -> String {
        let which = if self.count == 1 {
            "record body needs".to_string()
        } else {
            format!(
                "{} record bodies (LSN {} to {}) need",
                self.count, self.first, self.last
            )
        };
        format!("{which} a zstd dictionary, and {}", self.diagnosis)
    }
}

/// Running state of a verify pass.
struct Checker<'a> {
    dicts: &'a LogDicts,
    expect: Lsn,
    chain: ChainHash,
    /// How the current segment's records chain: its header's format (a
    /// segment whose header is damaged keeps the previous segment's).
    form: ChainForm,
    records: u64,
    problems: Vec<Problem>,
}

impl Checker<'_> {
    fn problem(&mut self, path: &Path, offset: u64, lsn: Option<Lsn>, detail: String) {
        self.problems.push(Problem {
            path: path.to_path_buf(),
            offset,
            lsn,
            detail,
            missing_dictionary: None,
        });
    }

    fn header(&mut self, path: &Path, data: &[u8]) {
        match SegmentHeader::decode(data) {
            Err(e) => self.problem(path, 0, Some(self.expect), format!("segment header: {e}")),
            Ok(h) => {
                self.form = h.chain_form;
                if h.first_lsn != self.expect {
                    let d = format!(
                        "segment header says it starts at LSN {} but LSN {} was expected",
                        h.first_lsn, self.expect
                    );
                    self.problem(path, 0, Some(self.expect), d);
                    self.expect = h.first_lsn;
                }
                if h.prev_chain != self.chain {
                    let d = "segment header's chain value does not continue the previous segment"
                        .to_string();
                    self.problem(path, 0, Some(self.expect), d);
                    self.chain = h.prev_chain;
                }
            }
        }
    }

    /// Notes that the record `lsn` at `off` needs dictionary `id`, missing
    /// or damaged. One problem per segment and dictionary, not one per
    /// record: it names the first record and counts the rest.
    fn missing_dict(
        &mut self,
        missing: &mut Option<MissingDict>,
        path: &Path,
        off: u64,
        lsn: Lsn,
        id: u32,
    ) {
        match missing {
            Some(m) if m.id == id => {
                m.count += 1;
                m.last = lsn;
            }
            _ => {
                if let Some(m) = missing {
                    self.problems[m.at].detail = m.detail();
                }
                let diagnosis = self.dicts.diagnose(id);
                self.problem(path, off, Some(lsn), String::new());
                if let Some(p) = self.problems.last_mut() {
                    p.missing_dictionary = Some(self.dicts.path_of(id));
                }
                *missing = Some(MissingDict {
                    at: self.problems.len() - 1,
                    id,
                    first: lsn,
                    last: lsn,
                    count: 1,
                    diagnosis,
                });
            }
        }
    }

    /// Checks a sealed segment: its header, its frames, and that its
    /// footer (if it still has one) agrees with them.
    fn sealed(&mut self, path: &Path, data: &[u8]) {
        self.header(path, data);
        let footer_at = data.len().saturating_sub(SEGMENT_FOOTER_LEN);
        match SegmentFooter::decode_tail(data) {
            Ok(Some(f)) => {
                let n = self.frames(path, data, footer_at);
                let last = Lsn(self.expect.0.saturating_sub(1));
                if f.record_count != n || f.last_lsn != last || f.last_chain != self.chain {
                    let d = format!(
                        "footer says {} records ending at LSN {} (chain {}), the frames hold {n} ending at LSN {last} (chain {})",
                        f.record_count, f.last_lsn, f.last_chain, self.chain
                    );
                    self.problem(path, footer_at as u64, Some(last), d);
                }
            }
            other => {
                let d = match other {
                    Err(e) => format!("segment footer: {e}"),
                    _ => "sealed segment has lost its footer".to_string(),
                };
                self.problem(path, footer_at as u64, None, d);
                self.frames(path, data, data.len());
            }
        }
    }

    /// Checks the frames in `data[64..end]`; returns the records seen.
    fn frames(&mut self, path: &Path, data: &[u8], end: usize) -> u64 {
        let mut seen = 0;
        let mut open_batch: Option<u64> = None;
        let mut missing: Option<MissingDict> = None;
        walk(&data[..end], SEGMENT_HEADER_LEN, |step| {
            match step {
                Step::Frame(off, f) => {
                    let off = off as u64;
                    if f.lsn != self.expect {
                        let d = format!(
                            "record has LSN {} where LSN {} was expected",
                            f.lsn, self.expect
                        );
                        self.problem(path, off, Some(self.expect), d);
                    }
                    if !f.chain_follows(self.chain, self.form) {
                        let d = "record's chain value does not follow from the previous record"
                            .to_string();
                        self.problem(path, off, Some(f.lsn), d);
                    }
                    match self.dicts.body(&f).and_then(|b| Event::decode_body(&b)) {
                        Ok(_) => {}
                        Err(CodecError::MissingDictionary { id }) => {
                            self.missing_dict(&mut missing, path, off, f.lsn, id);
                        }
                        Err(e) => self.problem(path, off, Some(f.lsn), format!("record body: {e}")),
                    }
                    open_batch = f.batch_continues().then_some(off);
                    self.expect = f.lsn.next();
                    self.chain = f.chain;
                    seen += 1;
                }
                Step::Bad { off, next, err } => {
                    let d = match next {
                        Some(n) => {
                            format!("not a valid record ({err}); records resume at byte {n}")
                        }
                        None => format!(
                            "not a valid record ({err}); nothing valid follows in this segment"
                        ),
                    };
                    self.problem(path, off as u64, Some(self.expect), d);
                }
            }
            true
        });
        if let Some(m) = &missing {
            self.problems[m.at].detail = m.detail();
        }
        if let Some(off) = open_batch {
            let d = "the segment ends inside an atomic batch".to_string();
            self.problem(path, off, Some(Lsn(self.expect.0.saturating_sub(1))), d);
        }
        self.records += seen;
        seen
    }
}

impl View {
    /// See [`Log::verify`](super::Log::verify). `closed` is the log's
    /// `tail.state`, if any: a tail whose records end before the last one
    /// it certified has lost acknowledged records. `reach` is how far the
    /// log's side files say it reached (`recovery::recorded_reach`): a log
    /// whose records end before it has lost its newest records.
    pub fn verify(
        &self,
        closed: Option<&TailState>,
        reach: Option<&Reached>,
    ) -> Result<VerifyReport> {
        let mut c = Checker {
            dicts: &self.dicts,
            expect: Lsn::FIRST,
            chain: ChainHash::ZERO,
            form: ChainForm::CURRENT,
            records: 0,
            problems: Vec::new(),
        };
        let mut segments = 0;
        let mut bytes = 0;
        for s in &self.sealed {
            segments += 1;
            let data: &[u8] = s.data()?;
            bytes += data.len() as u64;
            c.sealed(&s.path, data);
        }
        let problems_before_tail = c.problems.len();
        if let Some(t) = &self.tail {
            segments += 1;
            let mut data = vec![0u8; t.committed_len as usize];
            t.file
                .read_exact_at(&mut data, 0)
                .map_err(|e| EngineError::io("read log segment", &t.path, e))?;
            bytes += data.len() as u64;
            c.header(&t.path, &data);
            c.frames(&t.path, &data, data.len());
            if let Some(d) = &t.damage {
                c.problem(&t.path, d.offset, Some(d.lsn), d.detail.clone());
            } else if let Some(d) =
                closed.and_then(|st| st.unmet(t.header.first_lsn, t.head, t.committed_len))
            {
                c.problem(&t.path, t.committed_len, Some(t.head.last_lsn.next()), d);
            }
        }
        // The end the side files record, unless the tail's own damage
        // (reported above) already accounts for the loss.
        let head = Lsn(c.expect.0.saturating_sub(1));
        let tail_damage_reported = self.tail.is_some() && c.problems.len() > problems_before_tail;
        if let Some(r) = reach.filter(|_| !tail_damage_reported) {
            if let Some(d) = r.unmet_by(head) {
                c.problem(&r.file, 0, Some(head.next()), d);
            }
        }
        Ok(VerifyReport {
            segments,
            records: c.records,
            bytes,
            head: Head {
                last_lsn: Lsn(c.expect.0.saturating_sub(1)),
                chain: c.chain,
            },
            problems: c.problems,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn problem_display_names_file_offset_and_lsn() {
        let p = Problem {
            path: PathBuf::from("log/00000000000000000001.seg"),
            offset: 4242,
            lsn: Some(Lsn(17)),
            detail: "record frame checksum mismatch".into(),
            missing_dictionary: None,
        };
        assert_eq!(
            p.to_string(),
            "log/00000000000000000001.seg at byte 4242 (LSN 17): record frame checksum mismatch"
        );
        let e: EngineError = p.into();
        assert!(e.is_corruption());
    }
}

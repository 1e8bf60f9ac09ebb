//! Filters for listings and exports.

use cairn_codec::{Event, EventKind, EventRef, Timestamp};

use crate::source::Record;

/// Which records a listing or export selects. Every field left `None`
/// selects everything; set fields must all match.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only this session.
    pub session: Option<String>,
    /// Only this run id.
    pub run: Option<String>,
    /// Only this kind.
    pub kind: Option<EventKind>,
    /// Only this agent.
    pub agent: Option<String>,
    /// Only this model.
    pub model: Option<String>,
    /// Only successes (`true`) or failures (`false`).
    pub ok: Option<bool>,
    /// Only records naming this workspace path, or a path under it when it
    /// is a directory, as git reads a pathspec: `src` (or `src/`) selects
    /// `src/main.rs` and `src/a/b.rs`, not `srcfoo.rs`. Matched against
    /// `path`, `to_path` and `files`.
    pub path: Option<String>,
    /// Only records at or after this time.
    pub since: Option<Timestamp>,
    /// Only records at or before this time.
    pub until: Option<Timestamp>,
    /// At most this many records.
    pub limit: Option<usize>,
    /// Newest first (default: oldest first, in LSN order).
    pub newest_first: bool,
}

impl Filter {
    /// A filter that selects everything, oldest first.
    pub fn all() -> Filter {
        Filter::default()
    }

    /// True if `event` passes every set condition (limit and order aside).
    pub fn matches_event(&self, e: &Event) -> bool {
        self.matches_ref(&EventRef::of(e))
    }

    /// True if the borrowed event `e` passes every set condition (limit and
    /// order aside).
    pub fn matches_ref(&self, e: &EventRef<'_>) -> bool {
        fn eq(want: &Option<String>, have: Option<&str>) -> bool {
            want.as_deref().is_none_or(|w| have == Some(w))
        }
        eq(&self.session, Some(e.session))
            && eq(&self.run, e.run)
            && self.kind.is_none_or(|k| k == e.kind)
            && eq(&self.agent, e.agent)
            && eq(&self.model, e.model)
            && self.ok.is_none_or(|ok| ok == e.ok)
            && self.path.as_deref().is_none_or(|p| {
                let under = |have: &str| path_covers(p, have);
                e.path.is_some_and(under)
                    || e.to_path.is_some_and(under)
                    || e.files.iter().any(|f| under(f))
            })
            && self.since.is_none_or(|t| e.ts >= t)
            && self.until.is_none_or(|t| e.ts <= t)
    }

    /// True if `record` passes every set condition (limit and order aside).
    pub fn matches(&self, r: &Record) -> bool {
        self.matches_event(&r.event)
    }

    /// True if no condition is set (limit and order aside).
    pub fn is_unconditional(&self) -> bool {
        let Filter {
            session,
            run,
            kind,
            agent,
            model,
            ok,
            path,
            since,
            until,
            limit: _,
            newest_first: _,
        } = self;
        session.is_none()
            && run.is_none()
            && kind.is_none()
            && agent.is_none()
            && model.is_none()
            && ok.is_none()
            && path.is_none()
            && since.is_none()
            && until.is_none()
    }
}

/// True if `have` is the path `want` or lies under it (`want` read as a
/// directory; a trailing `/` on it changes nothing, and an empty one is the
/// whole workspace).
pub fn path_covers(want: &str, have: &str) -> bool {
    cairn_snapshot::relpath::covers(want.trim_end_matches('/'), have)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_path_covers_itself_and_what_lies_under_it() {
        for (want, have, yes) in [
            ("src/main.rs", "src/main.rs", true),
            ("src", "src/main.rs", true),
            ("src/", "src/a/b.rs", true),
            ("src//", "src/a/b.rs", true),
            ("src", "src", true),
            ("src", "srcfoo.rs", false),
            ("src/main.rs", "src/main.rs.bak", false),
            ("src/a", "src/ab/c.rs", false),
            ("src/main.rs", "src", false),
            ("/", "anything/at/all", true),
            ("", "x", true),
        ] {
            assert_eq!(path_covers(want, have), yes, "{want:?} covers {have:?}");
        }
        let mut e = Event::new(EventKind::Apply, "s");
        e.files = vec!["docs/a.md".into(), "src/x/y.rs".into()];
        let under = |p: &str| Filter {
            path: Some(p.into()),
            ..Filter::all()
        };
        assert!(under("src/x").matches_event(&e));
        assert!(under("docs").matches_event(&e));
        assert!(!under("src/y").matches_event(&e));
    }

    fn ev() -> Event {
        let mut e = Event::new(EventKind::FileMove, "s1").with_path("a.rs");
        e.to_path = Some("b.rs".into());
        e.run = Some("r1".into());
        e.agent = Some("coder".into());
        e.model = Some("m".into());
        e.ts = Timestamp(1000);
        e
    }

    #[test]
    fn each_condition_can_exclude() {
        let e = ev();
        assert!(Filter::all().matches_event(&e));
        assert!(Filter::all().is_unconditional());
        let yes = Filter {
            session: Some("s1".into()),
            run: Some("r1".into()),
            kind: Some(EventKind::FileMove),
            agent: Some("coder".into()),
            model: Some("m".into()),
            ok: Some(true),
            path: Some("b.rs".into()),
            since: Some(Timestamp(1000)),
            until: Some(Timestamp(1000)),
            limit: Some(1),
            newest_first: true,
        };
        assert!(yes.matches_event(&e));
        assert!(!yes.is_unconditional());
        let nos = [
            Filter {
                session: Some("s2".into()),
                ..Filter::all()
            },
            Filter {
                run: Some("r2".into()),
                ..Filter::all()
            },
            Filter {
                kind: Some(EventKind::FileWrite),
                ..Filter::all()
            },
            Filter {
                agent: Some("x".into()),
                ..Filter::all()
            },
            Filter {
                model: Some("x".into()),
                ..Filter::all()
            },
            Filter {
                ok: Some(false),
                ..Filter::all()
            },
            Filter {
                path: Some("c.rs".into()),
                ..Filter::all()
            },
            Filter {
                since: Some(Timestamp(1001)),
                ..Filter::all()
            },
            Filter {
                until: Some(Timestamp(999)),
                ..Filter::all()
            },
        ];
        for f in nos {
            assert!(!f.matches_event(&e), "{f:?}");
        }
    }
}

//! The report as Markdown: the sessions table and the timeline, for a
//! terminal or a pull request. Texts from the history are kept on one
//! line and their Markdown characters escaped, so a prompt cannot break
//! the table or inject links and HTML.

use std::io::Write;

use super::{Detail, Report, Row, SESSION_COLUMNS};

/// Escapes what Markdown (and the HTML it allows) would read as markup.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' | '`' | '*' | '_' | '[' | ']' | '|' | '#' | '!' | '~' => {
                out.push('\\');
                out.push(c);
            }
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '\n' | '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// Writes `r` as Markdown.
pub fn write(r: &Report, out: &mut Vec<u8>) -> std::io::Result<()> {
    writeln!(out, "# cairn report\n")?;
    if let Some(w) = &r.workspace {
        writeln!(
            out,
            "Workspace `{}`, {} records.\n",
            w.replace('`', "'"),
            r.rows.len()
        )?;
    }
    sessions(r, out)?;
    for (lane, s) in r.sessions.iter().enumerate() {
        writeln!(out, "\n## Timeline: {}\n", esc(&s.id))?;
        for row in r.rows.iter().filter(|row| row.lane == lane) {
            timeline_item(row, out)?;
        }
    }
    Ok(())
}

/// The sessions table, a row per session.
fn sessions(r: &Report, out: &mut Vec<u8>) -> std::io::Result<()> {
    writeln!(out, "## Sessions\n")?;
    write!(out, "| session |")?;
    for (name, _) in SESSION_COLUMNS {
        write!(out, " {name} |")?;
    }
    write!(out, "\n|---|")?;
    for (_, numeric) in SESSION_COLUMNS {
        write!(out, "{}", if numeric { "---:|" } else { "---|" })?;
    }
    writeln!(out)?;
    for s in &r.sessions {
        write!(out, "| {}", esc(&s.id))?;
        if let Some(p) = &s.parent {
            write!(out, " (subagent of {})", esc(p))?;
        }
        write!(out, " |")?;
        for cell in s.cells() {
            write!(out, " {cell} |")?;
        }
        writeln!(out)?;
    }
    Ok(())
}

/// One record of a session's timeline: LSN, kind (a checkpoint in bold),
/// summary, a rollback's edge, marks for abandoned and failed, and the
/// files it changed.
fn timeline_item(row: &Row, out: &mut Vec<u8>) -> std::io::Result<()> {
    let e = &row.record.event;
    let mark = match e.kind {
        cairn::EventKind::CheckpointCreate => "**",
        _ => "",
    };
    write!(
        out,
        "- `@{}` {mark}{}{mark} {}",
        row.record.lsn,
        e.kind.name(),
        esc(&row.summary)
    )?;
    if let Some((t, redo)) = row.edge {
        write!(
            out,
            " {} c{}",
            if redo { "↪ redo to" } else { "↩ back to" },
            t.0
        )?;
    }
    if row.abandoned {
        write!(out, " _(abandoned)_")?;
    }
    if !e.ok {
        write!(out, " **failed**")?;
    }
    if let Detail::Files(files) = &row.detail {
        let changed: Vec<String> = files
            .iter()
            .map(|f| match f.stat {
                Some((a, d)) => format!("{} +{a} -{d}", esc(&f.path)),
                None => format!("{} ({})", esc(&f.path), f.status),
            })
            .collect();
        if !changed.is_empty() {
            write!(out, " — {}", changed.join(", "))?;
        }
    }
    writeln!(out)
}

//! The report as Markdown: the sessions table and the timeline, for a
//! terminal or a pull request. Texts from the history are kept on one
//! line and their Markdown characters escaped, so a prompt cannot break
//! the table or inject links and HTML.

use std::io::Write;

use super::{Detail, Report};

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
    writeln!(out, "## Sessions\n")?;
    writeln!(out, "| session | prompts | replies | tool calls | failures | files | checkpoints | rollbacks | from | to | tokens in/out |")?;
    writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|")?;
    for s in &r.sessions {
        let (from, to) = s
            .span
            .map(|(a, b)| (a.to_iso(), b.to_iso()))
            .unwrap_or_default();
        writeln!(
            out,
            "| {}{} | {} | {} | {} | {} | {} | {} | {} | {from} | {to} | {} |",
            esc(&s.id),
            s.parent
                .as_deref()
                .map(|p| format!(" (subagent of {})", esc(p)))
                .unwrap_or_default(),
            s.prompts,
            s.replies,
            s.tool_calls,
            s.failures,
            s.files,
            s.checkpoints,
            s.rollbacks,
            s.tokens
                .map(|(i, o)| format!("{i} / {o}"))
                .unwrap_or_default()
        )?;
    }
    for (lane, s) in r.sessions.iter().enumerate() {
        writeln!(out, "\n## Timeline: {}\n", esc(&s.id))?;
        for row in r.rows.iter().filter(|row| row.lane == lane) {
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
            writeln!(out)?;
        }
    }
    Ok(())
}

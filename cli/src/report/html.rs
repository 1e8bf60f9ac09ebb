//! The report as one HTML page: inline CSS and JavaScript, nothing loaded
//! from elsewhere. Readable without JavaScript (every row, summary and
//! diff is in the markup; a row's details open with a click, as
//! `<details>` does); the script adds the filters and the search. Every
//! string from the history goes through [`esc`], and none is ever placed
//! inside the script.

use std::io::Write;

use super::{Detail, FileChange, Report, Row, SESSION_COLUMNS};

/// The most lanes drawn side by side; sessions past it share the last.
const MAX_LANES: usize = 16;
/// The most rows laid out as the page loads. A longer timeline is kept as
/// markup inside `<noscript>` (shown as it is without JavaScript); with
/// JavaScript, the script lays out this many rows at a time, more as the
/// reader scrolls, so a history of 100,000 records opens as fast as one
/// of a few thousand.
const INLINE_ROWS: usize = 2_000;

const STYLE: &str = r#"
:root{--fg:#1d1f21;--dim:#6b7280;--bg:#fff;--line:#e5e7eb;--add:#e6ffec;--del:#ffebe9;--hunk:#ddf4ff;--cp:#0969da;--rb:#bf8700;--bad:#cf222e}
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;color:var(--fg);background:var(--bg);margin:0 1.5rem 3rem}
h1{font-size:1.4rem;margin:1rem 0 .2rem}h2{font-size:1.1rem;margin:1.4rem 0 .4rem}
.meta,.dim{color:var(--dim)}
table{border-collapse:collapse;font-size:13px}th,td{border-bottom:1px solid var(--line);padding:.2rem .6rem;text-align:left;white-space:nowrap}
td.n{text-align:right}
form{display:flex;gap:.5rem;flex-wrap:wrap;align-items:center;margin:.6rem 0;position:sticky;top:0;background:var(--bg);padding:.4rem 0;border-bottom:1px solid var(--line);z-index:1}
ol{list-style:none;margin:0;padding:0}
#tl>li{content-visibility:auto;contain-intrinsic-size:auto 1.5em;border-bottom:1px solid #f3f4f6}
#tl>li>div,#tl summary{white-space:nowrap;overflow:hidden;text-overflow:ellipsis;padding:.05rem 0}
#tl summary{cursor:pointer;list-style:none}#tl summary::-webkit-details-marker{display:none}
code,pre{font:12.5px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace}
#tl code{color:var(--dim);white-space:pre}#tl code b{color:var(--fg);font-weight:400}#tl code .c{color:var(--cp)}#tl code .r{color:var(--rb)}
#tl i{font-style:normal;color:var(--dim);display:inline-block;min-width:4.5em}
#tl s{text-decoration:none;color:var(--dim)}
#tl u{text-decoration:none;display:inline-block;min-width:9em;font-weight:600}
#tl [data-k="checkpoint.create"] u{color:var(--cp)}#tl [data-k=rollback] u{color:var(--rb)}#tl .bad u{color:var(--bad)}
.ab{opacity:.5}.ab u::after{content:" (abandoned)";font-weight:400}
.e{color:var(--rb);margin-left:.6em}
.x{margin:.3rem 0 .8rem 2rem}
.x h4{margin:.5rem 0 .2rem;font:600 13px ui-monospace,monospace}
pre{margin:0;padding:.3rem .5rem;background:#f6f8fa;overflow-x:auto;white-space:pre-wrap;word-break:break-all}
pre .a{background:var(--add);display:block}pre .d{background:var(--del);display:block}pre .h{background:var(--hunk);display:block;color:var(--dim)}
"#;

const SCRIPT: &str = r#"
(function(){
var f=document.getElementById('f');f.hidden=false;
var tl=document.getElementById('tl'),n=document.getElementById('n'),more=document.getElementById('more');
var ns=document.getElementById('rows');
// Every row as markup and what the filters read of it. A long timeline
// comes as the text of its <noscript> and is laid out a chunk at a time.
var rows=[];
function unesc(s){return s.replace(/&quot;/g,'"').replace(/&#39;/g,"'").replace(/&lt;/g,'<').replace(/&gt;/g,'>').replace(/&amp;/g,'&')}
var head=/^<li id=r(\d+) data-k=(\S+?)(?: class=(?:"([^"]*)"|(\w+)))?(?: data-a=(\d+))?(?: data-m=(\d+))?(?: data-p="([^"]*)")?>/;
if(ns){
 var parts=ns.textContent.split('\n<li id=r');
 for(var i=0;i<parts.length;i++){var t=parts[i];
  if(i==0){var at=t.indexOf('<li id=r');if(at<0)continue;t=t.slice(at)}else{t='<li id=r'+t}
  var m=head.exec(t);if(!m)continue;var c=m[3]||m[4]||'';
  rows.push({html:t,lsn:m[1],k:m[2],bad:c.indexOf('bad')>=0,a:m[5]||'',m:m[6]||'',p:unesc(m[7]||''),text:null});
 }
}else{
 var lis=tl.children;
 for(var j=0;j<lis.length;j++){var li=lis[j],d=li.dataset;
  rows.push({el:li,lsn:li.id.slice(1),k:d.k,bad:li.classList.contains('bad'),a:d.a||'',m:d.m||'',p:d.p||'',text:null});}
}
var CHUNK=500,shown=[],drawn=0;
function v(id){return document.getElementById(id).value}
function text(r){if(r.text===null){r.text=(r.el?r.el.textContent:unesc(r.html.replace(/<[^>]*>/g,''))).toLowerCase()}return r.text}
function draw(upto){
 if(!ns)return;var h='';
 while(drawn<shown.length&&drawn<upto){h+=shown[drawn].html;drawn++}
 if(h)tl.insertAdjacentHTML('beforeend',h);
 more.textContent=drawn<shown.length?(shown.length-drawn)+' more records: scroll down':'';
}
function apply(){
 var k=v('fk'),a=v('fa'),m=v('fm'),ok=v('fo'),p=v('fp'),q=v('fq').toLowerCase();shown=[];
 for(var i=0;i<rows.length;i++){var r=rows[i];
  var show=(!k||r.k===k)&&(!a||r.a===a)&&(!m||r.m===m)&&(!ok||(ok==='failed')===r.bad)
   &&(!p||r.p.indexOf(p)>=0)&&(!q||text(r).indexOf(q)>=0);
  if(r.el)r.el.hidden=!show;if(show)shown.push(r)}
 n.textContent=shown.length+' of '+rows.length+' records';
 if(ns){tl.textContent='';drawn=0;draw(CHUNK)}
}
// A link to a row not laid out yet lays out the rows up to it.
function reveal(){var id=location.hash.slice(2);if(!ns||!id)return;
 for(var i=drawn;i<shown.length;i++){if(shown[i].lsn===id){draw(i+CHUNK);var el=document.getElementById('r'+id);if(el)el.scrollIntoView();return}}}
f.addEventListener('input',apply);f.addEventListener('submit',function(e){e.preventDefault()});
window.addEventListener('hashchange',reveal);
if(ns&&'IntersectionObserver' in window){new IntersectionObserver(function(es){if(es[0].isIntersecting)draw(drawn+CHUNK)},{rootMargin:'800px'}).observe(more)}
else if(ns){window.addEventListener('scroll',function(){if(window.innerHeight+window.scrollY>document.body.offsetHeight-800)draw(drawn+CHUNK)})}
apply();reveal();
window.cairnReport={records:function(){return rows.length},shown:function(){return shown.length},drawn:function(){return ns?drawn:shown.length},more:function(){draw(drawn+CHUNK)}};
})();
"#;

/// Escapes `s` for HTML text and attribute values.
pub fn esc(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.contains(['&', '<', '>', '"', '\'']) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Writes `r` as one HTML page.
pub fn write(r: &Report, out: &mut Vec<u8>) -> std::io::Result<()> {
    write!(
        out,
        "<!doctype html>\n<html lang=en><head><meta charset=utf-8>\
         <meta name=viewport content=\"width=device-width\">\
         <title>cairn report</title><style>{STYLE}</style></head><body>\n"
    )?;
    writeln!(out, "<h1>cairn report</h1>")?;
    let span = match (r.rows.first(), r.rows.last()) {
        (Some(a), Some(b)) => format!("@{} to @{}", a.record.lsn, b.record.lsn),
        _ => "no records".into(),
    };
    writeln!(
        out,
        "<p class=meta>{}{} ({span}), {}</p>",
        r.workspace
            .as_deref()
            .map(|w| format!("workspace <code>{}</code> &middot; ", esc(w)))
            .unwrap_or_default(),
        crate::output::count(r.rows.len() as u64, "record"),
        crate::output::count(r.sessions.len() as u64, "session")
    )?;
    sessions(r, out)?;
    filters(r, out)?;
    timeline(r, out)?;
    write!(out, "<script>{SCRIPT}</script>\n</body></html>\n")
}

/// The summary table: one row per session.
fn sessions(r: &Report, out: &mut Vec<u8>) -> std::io::Result<()> {
    write!(
        out,
        "<h2>Sessions</h2><table><thead><tr><th>lane</th><th>session</th>"
    )?;
    for (name, _) in SESSION_COLUMNS {
        write!(out, "<th>{name}</th>")?;
    }
    writeln!(out, "</tr></thead><tbody>")?;
    for (i, s) in r.sessions.iter().enumerate() {
        write!(out, "<tr><td class=n>{}</td><td>{}", i + 1, esc(&s.id))?;
        if let Some(p) = &s.parent {
            write!(out, " <span class=dim>(subagent of {})</span>", esc(p))?;
        }
        write!(out, "</td>")?;
        for ((_, numeric), cell) in SESSION_COLUMNS.iter().zip(s.cells()) {
            let class = if *numeric { " class=n" } else { "" };
            write!(out, "<td{class}>{cell}</td>")?;
        }
        writeln!(out, "</tr>")?;
    }
    writeln!(out, "</tbody></table>")
}

/// The filter bar (hidden until the script shows it).
fn filters(r: &Report, out: &mut Vec<u8>) -> std::io::Result<()> {
    writeln!(out, "<h2>Timeline</h2><form id=f hidden>")?;
    let select = |out: &mut Vec<u8>, id: &str, all: &str, opts: &[(String, String)]| {
        write!(out, "<select id={id}><option value=\"\">{all}</option>")?;
        for (value, label) in opts {
            write!(
                out,
                "<option value=\"{}\">{}</option>",
                esc(value),
                esc(label)
            )?;
        }
        writeln!(out, "</select>")
    };
    let named = |v: &[String]| -> Vec<(String, String)> {
        v.iter().map(|k| (k.clone(), k.clone())).collect()
    };
    let indexed = |v: &[String]| -> Vec<(String, String)> {
        v.iter()
            .enumerate()
            .map(|(i, k)| (i.to_string(), k.clone()))
            .collect()
    };
    select(out, "fk", "every kind", &named(&r.kinds))?;
    select(out, "fa", "every agent", &indexed(&r.agents))?;
    select(out, "fm", "every model", &indexed(&r.models))?;
    select(
        out,
        "fo",
        "ok or failed",
        &[
            ("ok".into(), "ok".into()),
            ("failed".into(), "failed".into()),
        ],
    )?;
    writeln!(out, "<input id=fp placeholder=path size=18><input id=fq type=search placeholder=search size=24><span id=n class=dim></span></form>")
}

/// The timeline: a row per record, its session's lane marked.
fn timeline(r: &Report, out: &mut Vec<u8>) -> std::io::Result<()> {
    let lanes = r.sessions.len().min(MAX_LANES);
    let spans = lane_spans(r, lanes);
    let lazy = r.rows.len() > INLINE_ROWS;
    if lazy {
        writeln!(
            out,
            "<ol id=tl></ol><p id=more class=dim></p><noscript id=rows><ol id=tl-all>"
        )?;
    } else {
        writeln!(out, "<ol id=tl>")?;
    }
    let mut graph = String::new();
    for row in &r.rows {
        graph.clear();
        lane_graph(row, &spans, &mut graph);
        timeline_row(r, row, &graph, out)?;
    }
    if lazy {
        writeln!(out, "</ol></noscript>")
    } else {
        writeln!(out, "</ol>")
    }
}

/// Each of the first `lanes` lanes' first and last LSN: a lane is drawn
/// from its session's first record to its last.
fn lane_spans(r: &Report, lanes: usize) -> Vec<(u64, u64)> {
    let mut first_last = vec![(u64::MAX, 0u64); lanes];
    for row in &r.rows {
        let l = row.lane.min(lanes.saturating_sub(1));
        let (a, b) = &mut first_last[l];
        *a = (*a).min(row.record.lsn.0);
        *b = (*b).max(row.record.lsn.0);
    }
    first_last
}

/// Draws `row`'s lanes into `graph`: its own lane's glyph, a line for
/// each other lane open across it.
fn lane_graph(row: &Row, spans: &[(u64, u64)], graph: &mut String) {
    let lanes = spans.len();
    let lsn = row.record.lsn.0;
    if lanes > 1 {
        for (j, &(a, b)) in spans.iter().enumerate() {
            if j == row.lane.min(lanes - 1) {
                graph.push_str(node_glyph(row));
            } else if a < lsn && lsn < b {
                graph.push('|');
            } else {
                graph.push(' ');
            }
        }
    } else {
        graph.push_str(node_glyph(row));
    }
}

/// One timeline row: the record's filter attributes, its lanes `graph`,
/// LSN, time, kind and summary, a rollback's edge, and its detail.
fn timeline_row(r: &Report, row: &Row, graph: &str, out: &mut Vec<u8>) -> std::io::Result<()> {
    let e = &row.record.event;
    let lsn = row.record.lsn.0;
    let kind = e.kind.name();
    write!(out, "<li id=r{lsn} data-k={kind}")?;
    match (row.abandoned, e.ok) {
        (true, false) => out.extend_from_slice(b" class=\"ab bad\""),
        (true, true) => out.extend_from_slice(b" class=ab"),
        (false, false) => out.extend_from_slice(b" class=bad"),
        (false, true) => {}
    }
    if let Some(i) = e
        .agent
        .as_deref()
        .and_then(|a| r.agents.iter().position(|x| x == a))
    {
        write!(out, " data-a={i}")?;
    }
    if let Some(i) = e
        .model
        .as_deref()
        .and_then(|m| r.models.iter().position(|x| x == m))
    {
        write!(out, " data-m={i}")?;
    }
    if let Some(p) = &e.path {
        write!(out, " data-p=\"{}\"", esc(p))?;
    }
    let has_detail = !matches!(row.detail, Detail::None);
    write!(
        out,
        ">{}<code>{graph}</code> <i>@{lsn}</i> <s>{}</s> <u>{kind}</u> {}",
        if has_detail {
            "<details><summary>"
        } else {
            "<div>"
        },
        time_of_day(&e.ts.to_iso()),
        esc(&row.summary),
    )?;
    if let Some((target, redo)) = row.edge {
        write!(
            out,
            "<a class=e href=#r{t}>{} c{t}</a>",
            if redo { "↪ redo to" } else { "↩ back to" },
            t = target.0
        )?;
    }
    if has_detail {
        out.extend_from_slice(b"</summary><div class=x>");
        detail(&row.detail, out)?;
        out.extend_from_slice(b"</div></details></li>\n");
    } else {
        out.extend_from_slice(b"</div></li>\n");
    }
    Ok(())
}

/// The glyph of a row's own lane: a checkpoint as a node, a rollback as
/// its edge back, others as a dot.
fn node_glyph(row: &Row) -> &'static str {
    use cairn::EventKind;
    match row.record.event.kind {
        EventKind::CheckpointCreate => "<b class=c>◉</b>",
        EventKind::Rollback => "<b class=r>↩</b>",
        _ if row.abandoned => "┆",
        _ => "<b>●</b>",
    }
}

/// `HH:MM:SS` of an ISO time (the whole is in the sessions table).
fn time_of_day(iso: &str) -> &str {
    iso.get(11..19).unwrap_or(iso)
}

/// A row's details.
fn detail(d: &Detail, out: &mut Vec<u8>) -> std::io::Result<()> {
    match d {
        Detail::None => Ok(()),
        Detail::Text(t, cut) => write!(
            out,
            "<pre>{}{}</pre>",
            esc(t),
            if *cut {
                "\n… (cut: `cairn log --json` has the whole text)"
            } else {
                ""
            }
        ),
        Detail::Omitted(cmd) => write!(
            out,
            "<p class=dim>Left out to keep the report small: <code>{}</code> shows it.</p>",
            esc(cmd)
        ),
        Detail::Files(files) if files.is_empty() => {
            write!(out, "<p class=dim>No files changed.</p>")
        }
        Detail::Files(files) => {
            for f in files {
                file(f, out)?;
            }
            Ok(())
        }
    }
}

/// One file's change: its header and coloured diff.
fn file(f: &FileChange, out: &mut Vec<u8>) -> std::io::Result<()> {
    write!(out, "<h4>{} <span class=dim>{}", esc(&f.path), f.status)?;
    if let Some((a, r)) = f.stat {
        write!(out, " +{a} -{r}")?;
    }
    out.extend_from_slice(b"</span></h4>");
    match &f.body {
        Err(why) => write!(out, "<p class=dim>{}</p>", esc(why)),
        Ok(lines) if lines.is_empty() => Ok(()),
        Ok(lines) => {
            out.extend_from_slice(b"<pre>");
            for l in lines {
                let class = if l.starts_with("@@") {
                    "h"
                } else if l.starts_with('+') && !l.starts_with("+++") {
                    "a"
                } else if l.starts_with('-') && !l.starts_with("---") {
                    "d"
                } else {
                    ""
                };
                if class.is_empty() {
                    writeln!(out, "{}", esc(l))?;
                } else {
                    write!(out, "<span class={class}>{}</span>", esc(l))?;
                }
            }
            if f.cut > 0 {
                write!(out, "… {} more lines (`cairn diff` shows them)", f.cut)?;
            }
            out.extend_from_slice(b"</pre>");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn everything_that_could_be_markup_is_escaped() {
        assert_eq!(
            esc("</script><img src=x onerror='a()'>&\""),
            "&lt;/script&gt;&lt;img src=x onerror=&#39;a()&#39;&gt;&amp;&quot;"
        );
        assert!(matches!(esc("plain text"), std::borrow::Cow::Borrowed(_)));
    }

    #[test]
    fn the_script_and_style_hold_no_closing_tag_of_their_own() {
        assert!(!SCRIPT.contains("</script"));
        assert!(!STYLE.contains("</style"));
    }
}

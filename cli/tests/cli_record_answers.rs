//! `record --ack` and `record --echo` answer every input line, in order:
//! a producer pairing answer n with its n-th line is never told that a
//! rejected line was recorded, nor given another line's LSN.
#![allow(clippy::unwrap_used)]

mod common;

use common::{cairn, cairn_stdin, ok};
use serde_json::Value;

/// Lines 1, 3 and 6 are events; line 2 is not JSON, line 4 is blank (no
/// event, no answer), line 5 has `"ok": null`.
const INPUT: &str = concat!(
    r#"{"kind":"prompt","session":"s","text":"one"}"#,
    "\n",
    "{not json\n",
    r#"{"kind":"prompt","session":"s","text":"three"}"#,
    "\n",
    "   \n",
    r#"{"kind":"tool_call","session":"s","tool":"sh","ok":null}"#,
    "\n",
    r#"{"kind":"prompt","session":"s","text":"six"}"#,
    "\n",
);

/// The bug: a rejected line got no answer, so the producer gave line 3's
/// LSN to line 2.
#[test]
fn record_ack_answers_a_rejected_line_with_its_number_and_reason() {
    let tmp = tempfile::tempdir().unwrap();
    ok(&cairn(tmp.path(), &["init"]));
    let o = cairn_stdin(tmp.path(), &["record", "--ack"], Some(INPUT));
    assert_eq!(o.status.code(), Some(4), "some lines were rejected");
    let out = String::from_utf8(o.stdout).unwrap();
    let answers: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(answers.len(), 5, "{out}");
    // An accepted line's answer is its LSN, a bare number, as before.
    for (i, text) in [(0, "one"), (2, "three"), (4, "six")] {
        let lsn = answers[i].as_u64().unwrap_or_else(|| panic!("{out}"));
        let rec = ok(&cairn(
            tmp.path(),
            &["log", "--json", "--until", &format!("@{lsn}")],
        ));
        let last: Value = serde_json::from_str(rec.lines().last().unwrap()).unwrap();
        assert_eq!(last["text"], text, "answer {i} names another line: {out}");
    }
    assert_eq!(answers[1]["line"], 2, "{out}");
    assert!(
        answers[1]["error"].as_str().unwrap().contains("JSON"),
        "{out}"
    );
    assert_eq!(answers[3]["line"], 5, "{out}");
    assert!(
        answers[3]["error"]
            .as_str()
            .unwrap()
            .contains("field `ok` is null"),
        "{out}"
    );
}

#[test]
fn record_echo_answers_a_rejected_line_in_order() {
    let tmp = tempfile::tempdir().unwrap();
    ok(&cairn(tmp.path(), &["init"]));
    let o = cairn_stdin(tmp.path(), &["record", "--echo"], Some(INPUT));
    assert_eq!(o.status.code(), Some(4));
    let out = String::from_utf8(o.stdout).unwrap();
    let answers: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let shape: Vec<String> = answers
        .iter()
        .map(|a| match (a.get("lsn"), a.get("line")) {
            (Some(_), None) => a["text"].as_str().unwrap().to_string(),
            (None, Some(n)) => format!("rejected {n}"),
            _ => panic!("neither a record nor a rejection: {a}"),
        })
        .collect();
    assert_eq!(
        shape,
        ["one", "rejected 2", "three", "rejected 5", "six"],
        "{out}"
    );
}

/// Time points assumed `ts` only goes forward, but `record` takes any: a
/// point at a time where the log's times go backwards is the running
/// maximum's, and the command says on stderr which records it leaves out.
#[test]
fn time_point_where_the_log_goes_back_in_time_is_noted() {
    let tmp = tempfile::tempdir().unwrap();
    ok(&cairn(tmp.path(), &["init"]));
    let lines = concat!(
        r#"{"kind":"prompt","ts":"2026-01-01T10:00:00Z","text":"a"}"#,
        "\n",
        r#"{"kind":"prompt","ts":"2026-01-01T12:00:00Z","text":"b"}"#,
        "\n",
        r#"{"kind":"prompt","ts":"2026-01-01T11:00:00Z","text":"c"}"#,
        "\n",
    );
    ok(&cairn_stdin(tmp.path(), &["record"], Some(lines)));
    // 11:30: after a (10:00), before b (12:00); c (11:00) comes after b.
    let o = cairn(tmp.path(), &["tree", "2026-01-01T11:30:00Z"]);
    ok(&o);
    let err = common::err(&o);
    assert!(err.contains("is @1,"), "{err}");
    assert!(err.contains("1 later record stamped at or before"), "{err}");
    // Where the times only went forward so far, no note.
    let o = cairn(tmp.path(), &["tree", "2026-01-01T10:30:00Z"]);
    ok(&o);
    assert!(
        !common::err(&o).contains("go backwards"),
        "{}",
        common::err(&o)
    );
}

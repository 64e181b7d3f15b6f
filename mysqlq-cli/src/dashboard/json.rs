//! Payloads, meta and errors as the job page shows them: JSON pretty-printed to escaped HTML on
//! the server, the long parts folded into `<details>` — strings over [`FOLD_CHARS`] characters
//! (the summary: their first [`HEAD_CHARS`] and their length), arrays over [`FOLD_ITEMS`]
//! items, and objects or arrays nested deeper than [`FOLD_DEPTH`] levels. A payload over
//! [`MAX_BYTES`] shows its first [`HEAD_BYTES`] as stored and a link to
//! `GET /jobs/{id}/payload.json`, the raw payload as a download.

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use maud::{Markup, PreEscaped, html};
use mysqlq::JobId;
use serde_json::Value;

use super::Shared;
use super::pages::{Fail, Res, admin};
use super::time::grouped;

/// Strings longer than this many characters fold.
pub(super) const FOLD_CHARS: usize = 120;
/// Characters of a folded string its summary shows.
pub(super) const HEAD_CHARS: usize = 80;
/// Arrays with more items than this fold.
pub(super) const FOLD_ITEMS: usize = 50;
/// Objects and arrays nested deeper than this fold (the outermost is level 1).
pub(super) const FOLD_DEPTH: usize = 5;
/// Payloads larger than this are not rendered whole.
pub(super) const MAX_BYTES: usize = 256 * 1024;
/// How much of a payload over [`MAX_BYTES`] the page shows.
pub(super) const HEAD_BYTES: usize = 16 * 1024;

/// `text` with `&`, `<`, `>` and `"` escaped, appended to `out`.
fn escape(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
}

/// `1 key`, `3 keys`, `10,240 characters`.
fn count(n: usize, one: &str, many: &str) -> String {
    let what = if n == 1 { one } else { many };
    format!("{} {what}", grouped(i64::try_from(n).unwrap_or(i64::MAX)))
}

/// A `<details>` whose summary is `summary` (escaped) and whose body `body` writes.
fn fold(out: &mut String, summary: &str, body: impl FnOnce(&mut String)) {
    out.push_str("<details class=\"fold\"><summary>");
    escape(out, summary);
    out.push_str("</summary>");
    body(out);
    out.push_str("</details>");
}

/// A string: JSON-quoted when `quoted` (a value of a JSON document), as is otherwise (an error
/// message); folded when longer than [`FOLD_CHARS`] characters.
fn string(out: &mut String, s: &str, quoted: bool) {
    let shown = |s: &str| {
        if quoted {
            serde_json::to_string(s).unwrap_or_default()
        } else {
            s.to_owned()
        }
    };
    let chars = s.chars().count();
    if chars <= FOLD_CHARS {
        escape(out, &shown(s));
        return;
    }
    let head: String = s.chars().take(HEAD_CHARS).collect();
    let mut summary = shown(&head);
    if quoted {
        summary.pop(); // the closing quote: the string goes on
    }
    summary.push_str("… (");
    summary.push_str(&count(chars, "character", "characters"));
    summary.push(')');
    fold(out, &summary, |out| escape(out, &shown(s)));
}

/// `v` pretty-printed (two spaces per level) at `indent`; `depth` counts the levels above it
/// since the document's start or the last fold.
fn write(out: &mut String, v: &Value, indent: usize, depth: usize) {
    match v {
        Value::String(s) => string(out, s, true),
        Value::Array(items) if !items.is_empty() => {
            let body = |out: &mut String, depth: usize| {
                out.push_str("[\n");
                for (i, item) in items.iter().enumerate() {
                    out.push_str(&" ".repeat(indent + 2));
                    write(out, item, indent + 2, depth + 1);
                    out.push_str(if i + 1 < items.len() { ",\n" } else { "\n" });
                }
                out.push_str(&" ".repeat(indent));
                out.push(']');
            };
            if items.len() > FOLD_ITEMS || depth >= FOLD_DEPTH {
                fold(
                    out,
                    &format!("[ {} ]", count(items.len(), "item", "items")),
                    |o| {
                        body(o, 0);
                    },
                );
            } else {
                body(out, depth);
            }
        }
        Value::Object(map) if !map.is_empty() => {
            let body = |out: &mut String, depth: usize| {
                out.push_str("{\n");
                for (i, (k, item)) in map.iter().enumerate() {
                    out.push_str(&" ".repeat(indent + 2));
                    escape(out, &serde_json::to_string(k).unwrap_or_default());
                    out.push_str(": ");
                    write(out, item, indent + 2, depth + 1);
                    out.push_str(if i + 1 < map.len() { ",\n" } else { "\n" });
                }
                out.push_str(&" ".repeat(indent));
                out.push('}');
            };
            if depth >= FOLD_DEPTH {
                fold(
                    out,
                    &format!("{{ {} }}", count(map.len(), "key", "keys")),
                    |o| {
                        body(o, 0);
                    },
                );
            } else {
                body(out, depth);
            }
        }
        other => escape(out, &other.to_string()),
    }
}

/// A JSON value, pretty-printed and folded.
pub(super) fn value(v: &Value) -> Markup {
    let mut out = String::new();
    write(&mut out, v, 0, 0);
    PreEscaped(out)
}

/// Free text (an error message), folded when long.
pub(super) fn text(s: &str) -> Markup {
    let mut out = String::new();
    string(&mut out, s, false);
    PreEscaped(out)
}

/// `1.2 MiB`, `300 KiB`.
fn size(bytes: usize) -> String {
    let b = bytes as f64;
    if bytes >= 1024 * 1024 {
        format!("{:.1} MiB", b / (1024.0 * 1024.0))
    } else {
        format!("{:.0} KiB", b / 1024.0)
    }
}

/// The block `id` showing a stored JSON document: pretty-printed and folded, or, past
/// [`MAX_BYTES`], its head and a link to `download`. Text that is not JSON is shown as text.
pub(super) fn document(id: &str, raw: &str, download: &str) -> Markup {
    if raw.len() > MAX_BYTES {
        let mut cut = HEAD_BYTES;
        while !raw.is_char_boundary(cut) {
            cut -= 1;
        }
        return html! {
            p.notice #(format!("{id}-large")) {
                "This document is " (size(raw.len())) ": its first " (size(cut)) " are shown as stored. "
                a href=(download) download { "Download it whole" }
            }
            div.json #(id) { (&raw[..cut]) "…" }
        };
    }
    let body = match serde_json::from_str::<Value>(raw) {
        Ok(v) => value(&v),
        Err(_) => text(raw),
    };
    html! { div.json #(id) { (body) } }
}

/// `GET /jobs/{id}/payload.json`: the payload as stored, as a download.
pub(super) async fn payload(State(state): State<Shared>, Path(id): Path<u64>) -> Res {
    let Some(j) = admin(&state).job(JobId(id)).await? else {
        return Err(Fail(StatusCode::NOT_FOUND, format!("error: no job {id}")));
    };
    let disposition = format!("attachment; filename=\"job-{id}-payload.json\"");
    Ok((
        [
            (header::CONTENT_TYPE, "application/json".to_owned()),
            (header::CONTENT_DISPOSITION, disposition),
        ],
        j.payload,
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn html(v: &Value) -> String {
        value(v).into_string()
    }

    #[test]
    fn pretty_and_escaped_like_serde_json() {
        let v = json!({"n": 5, "note": "<script>alert('x')</script> & \"q\"", "list": [1, true, null], "empty": {}, "none": []});
        let want = serde_json::to_string_pretty(&v)
            .unwrap()
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;");
        assert_eq!(html(&v), want);
        assert!(!html(&v).contains("<script"));
    }

    #[test]
    fn long_strings_fold_with_their_head_and_length() {
        let short = "y".repeat(FOLD_CHARS);
        assert!(!html(&json!(short)).contains("<details"));
        let long = format!("{}<b>{}", "é".repeat(100), "x".repeat(10_137));
        let out = html(&json!({ "note": long }));
        let head: String = "é".repeat(HEAD_CHARS);
        assert!(
            out.contains(&format!(
                "&quot;note&quot;: <details class=\"fold\"><summary>&quot;{head}… (10,240 characters)</summary>&quot;"
            )),
            "{out}"
        );
        assert!(
            out.contains("&lt;b&gt;"),
            "the whole string, escaped, inside"
        );
        assert!(!out.contains("<b>"));
        assert_eq!(out.matches("<details").count(), 1);
    }

    #[test]
    fn long_arrays_and_deep_objects_fold() {
        let out = html(
            &json!({ "ids": (0..51).collect::<Vec<_>>(), "few": (0..50).collect::<Vec<_>>() }),
        );
        assert!(out.contains("<summary>[ 51 items ]</summary>[\n"), "{out}");
        assert_eq!(out.matches("<details").count(), 1, "50 items do not fold");
        // Levels 1–5 open, the object at level 6 folded; inside it, five more levels open.
        let mut deep = json!({"end": 1});
        for i in 0..10 {
            deep = json!({ format!("l{i}"): deep });
        }
        let out = html(&deep);
        assert_eq!(out.matches("<details").count(), 2, "{out}");
        let first = out.find("<details").unwrap();
        assert_eq!(out[..first].matches('{').count(), 5);
        assert!(
            out[first..].starts_with("<details class=\"fold\"><summary>{ 1 key }</summary>{\n")
        );
    }

    #[test]
    fn large_documents_show_their_head_and_a_link() {
        let big = json!({ "blob": "z".repeat(MAX_BYTES) }).to_string();
        let out = document("payload", &big, "/jobs/7/payload.json").into_string();
        assert!(out.contains("href=\"/jobs/7/payload.json\""), "{out:.300}");
        assert!(out.contains("256 KiB"));
        assert!(out.len() < HEAD_BYTES + 1000);
        let small = document("payload", "{\"a\": [1]}", "/x").into_string();
        assert_eq!(
            small,
            "<div class=\"json\" id=\"payload\">{\n  &quot;a&quot;: [\n    1\n  ]\n}</div>"
        );
        // Not JSON: shown as text, escaped.
        let odd = document("payload", "<not json>", "/x").into_string();
        assert!(odd.contains("&lt;not json&gt;"));
    }

    #[test]
    fn errors_fold_as_text() {
        assert_eq!(text("a < b").into_string(), "a &lt; b");
        let out = text(&"boom ".repeat(40)).into_string();
        assert!(
            out.starts_with("<details class=\"fold\"><summary>boom boom"),
            "{out}"
        );
        assert!(out.contains("(200 characters)"));
    }
}

//! The three wire formats through `tamp compact` and `tamp pages show`, and what no reader
//! knows (issue 31): a request holding an item type or role invented for the test is
//! compacted around it, the item comes back byte for byte, and the report names it.

use std::path::Path;

use serde_json::{json, Value};
use tamp_e2e::assert_contains;
use tamp_e2e::assert_ok;
use tamp_e2e::{corpus, run_tamp as tamp, scratch_dir, text, workspace_root};

/// `tamp compact` of `input` (a file in `dir`) in `format` through the sample chain, with
/// the text report on stderr and the JSON report in `report.json`.
fn compact(dir: &Path, input: &Path, format: &str) -> (String, String, Value) {
    let chain = workspace_root().join("examples/chains/default.toml");
    let out = tamp(
        &[
            "compact",
            input.to_str().unwrap(),
            "--format",
            format,
            "--config",
            chain.to_str().unwrap(),
            "--store",
            dir.join("store.sqlite3").to_str().unwrap(),
            "--report",
            "--report-json",
            dir.join("report.json").to_str().unwrap(),
        ],
        dir,
    );
    assert_ok(&out, format!("{format}: "));
    let report = std::fs::read_to_string(dir.join("report.json")).unwrap();
    (
        text(&out.stdout),
        text(&out.stderr),
        serde_json::from_str(&report).unwrap(),
    )
}

#[test]
fn responses_in_responses_out_and_pages_shown_as_items() {
    let dir = scratch_dir("wire-responses");
    let input = dir.join("conversation.json");
    std::fs::write(&input, corpus("responses", "openhands_llama4_ponyc-4588")).unwrap();
    let (out, stderr, report) = compact(&dir, &input, "responses");
    assert_contains(&stderr, "acted");
    let out: Value = serde_json::from_str(&out).unwrap();
    assert!(out.get("messages").is_none());
    assert!(out["instructions"]
        .as_str()
        .unwrap()
        .starts_with("You are OpenHands"));
    let items = out["input"].as_array().unwrap();
    let original: Value =
        serde_json::from_str(&corpus("responses", "openhands_llama4_ponyc-4588")).unwrap();
    assert!(items.len() < original["input"].as_array().unwrap().len());
    assert!(items.iter().any(|i| i["type"] == "function_call_output"));
    // A summary is a user message item holding the marker.
    let summary = items
        .iter()
        .find(|i| {
            i["content"][0]["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("<tamp-summary"))
        })
        .expect("a summary item");
    assert_eq!(
        (&summary["type"], &summary["role"]),
        (&json!("message"), &json!("user"))
    );

    let page = report["stages"][0]["pages"][0]
        .as_str()
        .unwrap()
        .to_string();
    let shown = tamp(
        &[
            "pages",
            "show",
            &page,
            "--store",
            dir.join("store.sqlite3").to_str().unwrap(),
        ],
        &dir,
    );
    assert_ok(&shown, "");
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["format"], "responses");
    // The archived items are the originals, verbatim.
    for item in shown["messages"].as_array().unwrap() {
        assert!(
            original["input"].as_array().unwrap().contains(item),
            "not an original: {item}"
        );
    }
}

/// An item of a type no API has, holding a number `serde_json::Value` cannot hold, and a
/// message in a role no API has, inserted in the middle of a conversation.
const INVENTED_ITEM: &str =
    r#"{"type":"x_telemetry_marker","id":"xt_1","payload":{"n":123456789012345678901234567890}}"#;
const INVENTED_ROLE: &str = r#"{"role":"x_reviewer","content":"looks fine","score":0.5}"#;

#[test]
fn invented_items_and_roles_are_compacted_around_and_come_back_exactly() {
    for format in ["anthropic", "openai", "responses"] {
        let dir = scratch_dir(&format!("wire-invented-{format}"));
        let original = corpus(format, "openhands_llama4_ponyc-4588");
        let value: Value = serde_json::from_str(&original).unwrap();
        let list = if format == "responses" {
            "input"
        } else {
            "messages"
        };
        let entries = value[list].as_array().unwrap();
        // Between two tool exchanges a third of the way in (before a user or assistant
        // message that starts a turn).
        let at = (entries.len() / 3..entries.len())
            .find(|&i| {
                let e = &entries[i];
                e["role"] == "assistant" && e["type"] != "function_call"
                    || e["type"] == "function_call" && entries[i - 1]["type"] != "function_call"
            })
            .unwrap();
        let mut texts: Vec<String> = entries.iter().map(|e| e.to_string()).collect();
        let invented = match format {
            "responses" => vec![INVENTED_ITEM, INVENTED_ROLE],
            _ => vec![INVENTED_ROLE],
        };
        for (k, e) in invented.iter().enumerate() {
            texts.insert(at + k, e.to_string());
        }
        let mut top = value.as_object().unwrap().clone();
        top.remove(list);
        let mut request = serde_json::to_string(&top).unwrap();
        request.truncate(request.len() - 1);
        request.push_str(&format!(
            "{}\"{list}\":[{}]}}",
            if top.is_empty() { "" } else { "," },
            texts.join(",")
        ));
        let input = dir.join("conversation.json");
        std::fs::write(&input, &request).unwrap();

        let (out, stderr, report) = compact(&dir, &input, format);
        assert!(stderr.contains("acted"), "{format}: {stderr}");
        let before = report["messages_before"].as_u64().unwrap();
        let after = report["messages_after"].as_u64().unwrap();
        assert!(after < before, "{format}: {before} -> {after}");
        for e in &invented {
            assert!(out.contains(e), "{format}: {e} not written back as sent");
        }
        let expected = match format {
            "responses" => {
                "opaque: 1 item of type \"x_telemetry_marker\", 1 message of role \"x_reviewer\""
            }
            _ => "opaque: 1 message of role \"x_reviewer\"",
        };
        assert!(stderr.contains(expected), "{format}: {stderr}");
        let opaque = report["opaque"]
            .as_array()
            .expect("the report's opaque field");
        assert!(
            opaque.contains(&json!({"kind": "role", "name": "x_reviewer", "count": 1})),
            "{format}: {opaque:?}"
        );
        // Summaries stand before and after it: compaction went on around it.
        let out: Value = serde_json::from_str(&out).unwrap();
        let entries = out[list].as_array().unwrap();
        let pos = entries
            .iter()
            .position(|e| e["role"] == "x_reviewer")
            .unwrap();
        let is_summary = |e: &Value| e.to_string().contains("tamp-summary page=");
        assert!(
            entries[..pos].iter().any(is_summary),
            "{format}: none before"
        );
        assert!(
            entries[pos..].iter().any(is_summary),
            "{format}: none after"
        );
    }
}

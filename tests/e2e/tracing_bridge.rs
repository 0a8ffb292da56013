//! A plugin's `tracing` events reach the host's subscriber, tagged with the plugin's name.
//! (Its own test binary: it installs the process's global subscriber.)

use std::io::Write;
use std::sync::{Arc, Mutex};

use tamp_e2e::{corpus_conversation, plugin, scratch_dir, write_chain};
use tamp_host::chain::{Chain, CompactOptions, FileOverrides};

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn plugin_events_reach_the_host_subscriber_with_the_plugin_name() {
    let captured = Captured::default();
    let writer = captured.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();

    let dir = scratch_dir("tracing");
    let toml = format!(
        "[budget]\nmax_tokens = 2000\n[store]\npath = \"p.sqlite3\"\n[[stage]]\nname = \"chatty\"\nplugin = \"{}\"\n[stage.config]\nmode = \"log\"\n",
        plugin("tamp_test_misbehaving").display()
    );
    let chain = Chain::from_file(&write_chain(&dir, &toml), FileOverrides::default()).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let input = corpus_conversation("anthropic", "taubench_gpt4o_airline_task2_trial2");
    rt.block_on(chain.compact(input, &CompactOptions::default()))
        .unwrap();

    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let line = |needle: &str| {
        text.lines()
            .find(|l| l.contains(needle))
            .map(str::to_string)
    };
    let error =
        line("misbehaving error event").unwrap_or_else(|| panic!("no error event in:\n{text}"));
    assert!(
        error.contains("ERROR") && error.contains("plugin=\"misbehaving\""),
        "{error}"
    );
    assert!(
        error.contains("mode=\"log\""),
        "fields are forwarded: {error}"
    );
    assert!(
        line("misbehaving warn event").is_some_and(|l| l.contains("WARN")),
        "{text}"
    );
    assert!(
        line("misbehaving info event").is_some_and(|l| l.contains("count=3")),
        "{text}"
    );
    // Filtered by the host's level: no debug events.
    assert!(line("misbehaving debug event").is_none(), "{text}");
}

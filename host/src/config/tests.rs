use super::*;
use crate::providers::config::ProviderKind;

fn parse(text: &str) -> Result<LoadedChainFile, ConfigError> {
    LoadedChainFile::parse(Path::new("chain.toml"), text.to_string())
}

#[test]
fn threads_section_errors_name_the_field_and_line() {
    assert!(parse("[threads]\nttl_secs = 3600\nmax_threads = 10\n").is_ok());
    for (text, field, line) in [
        ("[threads]\nttl_secs = 0\n", "threads.ttl_secs", 2),
        ("[threads]\n\nttl_secs = 99999999\n", "threads.ttl_secs", 3),
        ("[threads]\nmax_threads = 0\n", "threads.max_threads", 2),
    ] {
        let err = parse(text).unwrap_err();
        assert!(err.message.starts_with(&format!("{field}: ")), "{err}");
        assert_eq!(err.line, Some(line), "{err}");
    }
}

#[test]
fn batch_section_defaults_and_errors_name_the_field_and_line() {
    let loaded = parse("").unwrap();
    assert_eq!(loaded.file.batch, BatchConfig::default());
    assert_eq!(loaded.file.batch.max_batch_requests, 100);
    let ok = parse("[batch]\nmax_batch_requests = 5\npoll_interval_secs = 0.05\n").unwrap();
    assert_eq!(ok.file.batch.max_batch_requests, 5);
    for (text, field, line) in [
        (
            "[batch]\nmax_batch_requests = 0\n",
            "batch.max_batch_requests",
            2,
        ),
        ("[batch]\n\nmax_attempts = 0\n", "batch.max_attempts", 3),
        (
            "[batch]\npoll_interval_secs = -1\n",
            "batch.poll_interval_secs",
            2,
        ),
        (
            "[batch]\napi_key_env = \"sk-ant-123\"\n",
            "batch.api_key_env",
            2,
        ),
        ("[batch]\nbase_url = \"ftp://x\"\n", "batch.base_url", 2),
    ] {
        let e = parse(text).unwrap_err();
        assert!(e.message.starts_with(field), "{text}: {e}");
        assert_eq!(e.line, Some(line), "{text}: {e}");
        assert!(!e.to_string().contains("sk-ant-123"), "{e}");
    }
    let unknown = parse("[batch]\nmax_batch = 3\n").unwrap_err();
    assert!(unknown.message.contains("max_batch"), "{unknown}");
}

#[test]
fn store_section_kinds_and_errors_name_the_field_and_line() {
    let default = parse("").unwrap();
    assert_eq!(default.file.store, StoreConfig::default());
    assert_eq!(
        default.store_spec(None).unwrap(),
        StoreSpec::Sqlite {
            path: DEFAULT_STORE_PATH.into()
        }
    );
    let sqlite = parse("[store]\npath = \"pages.sqlite3\"\n").unwrap();
    assert_eq!(
        sqlite.store_spec(None).unwrap(),
        StoreSpec::Sqlite {
            path: Path::new(".").join("pages.sqlite3")
        }
    );

    let var = "TAMP_CONFIG_TEST_DATABASE_URL";
    // The issue's form: an inline table (before any `[table]` header, as TOML requires).
    let inline = format!(
        "store = {{ kind = \"postgres\", url_env = \"{var}\", pool_size = 3 }}\n[budget]\nmax_tokens = 1000\n"
    );
    let pg = parse(&inline).unwrap();
    assert_eq!(pg.file.store.kind, StoreKind::Postgres);
    let missing = pg.store_spec(None).unwrap_err();
    assert!(missing.message.starts_with("store.url_env"), "{missing}");
    assert!(missing.message.contains(var), "{missing}");
    assert_eq!(missing.line, Some(1), "{missing}");
    std::env::set_var(var, "postgres://tamp:s3cret@127.0.0.1:5432/tamp");
    assert_eq!(
        pg.store_spec(None).unwrap(),
        StoreSpec::Postgres {
            url: "postgres://tamp:s3cret@127.0.0.1:5432/tamp".into(),
            pool_size: 3,
            ca_file: None,
        }
    );
    // `--store` names a file: it wins over the chain file's database.
    assert_eq!(
        pg.store_spec(Some(Path::new("x.sqlite3"))).unwrap(),
        StoreSpec::Sqlite {
            path: PathBuf::from("x.sqlite3")
        }
    );
    // ca_file: relative to the chain file's directory, and a missing one named with its
    // line before any connection is tried.
    let dir = std::env::temp_dir().join(format!("tamp-config-ca-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("db-ca.pem"), "").unwrap();
    let with_ca = |ca: &str| {
        LoadedChainFile::parse(
            &dir.join("chain.toml"),
            format!("[store]\nkind = \"postgres\"\nurl_env = \"{var}\"\nca_file = \"{ca}\"\n"),
        )
        .unwrap()
    };
    match with_ca("db-ca.pem").store_spec(None).unwrap() {
        StoreSpec::Postgres { ca_file, .. } => {
            assert_eq!(ca_file, Some(dir.join("db-ca.pem")))
        }
        other => panic!("{other:?}"),
    }
    let missing = with_ca("nope.pem").store_spec(None).unwrap_err();
    assert!(
        missing.message.starts_with(&format!(
            "store.ca_file: {}: ",
            dir.join("nope.pem").display()
        )),
        "{missing}"
    );
    assert_eq!(missing.line, Some(4), "{missing}");
    std::fs::remove_dir_all(&dir).unwrap();
    std::env::remove_var(var);

    for (text, field, line) in [
        ("[store]\nkind = \"postgres\"\n", "store.url_env", 1),
        (
            "[store]\nkind = \"postgres\"\nurl_env = \"X\"\npath = \"a\"\n",
            "store.path",
            4,
        ),
        ("[store]\nurl_env = \"X\"\n", "store.url_env", 2),
        (
            "[store]\nkind = \"postgres\"\nurl_env = \"postgres://u:pw@h/db\"\n",
            "store.url_env",
            3,
        ),
        (
            "[store]\nkind = \"postgres\"\nurl_env = \"X\"\npool_size = 0\n",
            "store.pool_size",
            4,
        ),
        ("[store]\nca_file = \"ca.pem\"\n", "store.ca_file", 2),
    ] {
        let e = parse(text).unwrap_err();
        assert!(e.message.starts_with(field), "{text}: {e}");
        assert_eq!(e.line, Some(line), "{text}: {e}");
        assert!(!e.to_string().contains("pw@"), "{e}");
    }
    let unknown = parse("[store]\nkind = \"mysql\"\n").unwrap_err();
    assert!(unknown.message.contains("mysql"), "{unknown}");
}

#[test]
fn defaults_apply_to_an_empty_file() {
    let f = parse("").unwrap();
    assert_eq!(f.file.budget, BudgetConfig::default());
    assert_eq!(f.file.provider.kind, ProviderKind::Extractive);
    assert!(f.file.stages.is_empty());
    let warnings = f.warnings();
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].starts_with("chain.toml: the chain has no [[stage]]"));
    let one = parse("[[stage]]\nname = \"a\"\nplugin = \"x\"\n").unwrap();
    assert!(one.warnings().is_empty());
}

#[test]
fn unknown_key_is_named_with_its_line() {
    let err = parse("[budget]\nmax_tokens = 100\nmax_tokenz = 5\n").unwrap_err();
    assert_eq!(err.line, Some(3));
    assert!(err.message.contains("max_tokenz"), "{err}");
    assert!(err.to_string().starts_with("chain.toml:3:"), "{err}");
}

#[test]
fn type_and_range_errors_name_the_field() {
    let err = parse("[budget]\n\n\nmax_tokens = \"lots\"\n").unwrap_err();
    assert_eq!(err.line, Some(4), "{err}");
    assert_eq!(
        err.message,
        "budget.max_tokens: invalid type: string \"lots\", expected u64"
    );
    let err = parse("[budget]\nkeep_recent = -3\n").unwrap_err();
    assert!(err.message.starts_with("budget.keep_recent: "), "{err}");
    assert_eq!(err.line, Some(2), "{err}");
    let err = parse("store = { kind = \"sqlite\", pool_size = \"8\" }\n").unwrap_err();
    assert!(err.message.starts_with("store.pool_size: "), "{err}");
    let stages = "[[stage]]\nname = \"a\"\nplugin = \"x\"\n\n[[stage]]\nname = \"b\"\nplugin = \"y\"\ntimeout_secs = \"soon\"\n";
    let err = parse(stages).unwrap_err();
    assert!(err.message.starts_with("stage[1].timeout_secs: "), "{err}");
    assert_eq!(err.line, Some(8), "{err}");
    let err = parse("[[stage]]\nname = \"a\"\n").unwrap_err();
    assert!(
        err.message.starts_with("stage[0]: missing field `plugin`"),
        "{err}"
    );
    // A syntax error has no field: the message stays the parser's.
    let err = parse("[budget\n").unwrap_err();
    assert!(!err.message.contains(": invalid"), "{err}");
}

#[test]
fn validation_errors_carry_their_table_and_key() {
    let budget = BudgetConfig {
        high_watermark: 0.4,
        low_watermark: 0.6,
        ..BudgetConfig::default()
    };
    let e = budget.validate().unwrap_err();
    assert_eq!((e.table, e.key), ("budget", "low_watermark"));
    assert_eq!(
        e.to_string(),
        "budget.low_watermark: must be below high_watermark (0.6 >= 0.4)"
    );
    let store = StoreConfig {
        pool_size: 0,
        ..StoreConfig::default()
    };
    let e = store.validate().unwrap_err();
    assert_eq!((e.table, e.key), ("store", "pool_size"));
    let batch = BatchConfig {
        lease_secs: 0.0,
        ..BatchConfig::default()
    };
    let e = batch.validate().unwrap_err();
    assert_eq!((e.table, e.key), ("batch", "lease_secs"));
    assert!(e.message.starts_with("must be a positive number"), "{e}");
}

#[test]
fn watermark_order_is_checked_and_located() {
    let err = parse("[budget]\nmax_tokens = 100\nhigh_watermark = 0.4\nlow_watermark = 0.6\n")
        .unwrap_err();
    assert!(err.message.starts_with("budget.low_watermark"), "{err}");
    assert_eq!(err.line, Some(4));
}

#[test]
fn stage_config_lines_are_found() {
    let text = "[[stage]]\nname = \"a\"\nplugin = \"x\"\n[stage.config]\nfoo = 1\nbar = \"z\"\n";
    let f = parse(text).unwrap();
    assert_eq!(f.stage_config_line(0, &["bar"]), Some(6));
    assert_eq!(f.stage_line(0), Some(1));
    assert_eq!(
        f.file.stages[0].get_ref().config_json(),
        serde_json::json!({"foo": 1, "bar": "z"})
    );
}

#[test]
fn lines_come_from_the_parsers_spans_wherever_a_key_is_written() {
    let text = "[budget]\n# max_tokens = 5 in a comment is no key\nmax_tokens = 10\n\n\
                [[stage]]\nname = \"a\"\nplugin = \"x\"\n\n\
                [[stage]]\nname = \"b\"\nplugin = \"y\"\n\
                config = { prompt = { style = \"terse\" }, labels = [\n  \"p\",\n  \"q\",\n] }\n";
    let f = parse(text).unwrap();
    assert_eq!(key_line(&f.source, &["budget", "max_tokens"]), Some(3));
    // A key not written: the table's header.
    assert_eq!(key_line(&f.source, &["budget", "keep_recent"]), Some(1));
    assert_eq!(key_line(&f.source, &["provider", "kind"]), None);
    // A field nested in an inline config, and an element of a multi-line array.
    assert_eq!(f.stage_config_line(1, &["prompt", "style"]), Some(12));
    assert_eq!(f.stage_config_line(1, &["labels", "1"]), Some(14));
    // No such field: the config's line; no config at all: the stage's header.
    assert_eq!(f.stage_config_line(1, &["nope"]), Some(12));
    assert_eq!(f.stage_config_line(0, &["nope"]), Some(5));
    // A table given as dotted keys at the top is found at them.
    let dotted = parse("budget.max_tokens = 100\nbudget.low_watermark = 0.9\n").unwrap_err();
    assert!(
        dotted.message.starts_with("budget.low_watermark: "),
        "{dotted}"
    );
    assert_eq!(dotted.line, Some(2), "{dotted}");
}

#[test]
fn duplicate_stage_names_and_bad_provider_are_rejected() {
    let err =
        parse("[[stage]]\nname = \"a\"\nplugin = \"x\"\n[[stage]]\nname = \"a\"\nplugin = \"y\"\n")
            .unwrap_err();
    assert!(err.message.contains("used by an earlier stage"), "{err}");
    assert_eq!(err.line, Some(4));
    let err = parse("[provider]\nkind = \"magic\"\n").unwrap_err();
    assert!(err.message.contains("unknown provider \"magic\""), "{err}");
    assert!(err.message.starts_with("provider.kind: "), "{err}");
    assert_eq!(err.line, Some(2));
    // Every kind a file may name reads back as itself.
    for kind in ProviderKind::ALL {
        let text = format!("[provider]\nkind = \"{kind}\"\n");
        let read: Result<ChainFile, _> = toml::from_str(&text);
        assert_eq!(read.unwrap().provider.kind, kind);
    }
    let err = parse("[provider]\nkind = \"scripted\"\n").unwrap_err();
    assert!(err.message.contains("provider.script"), "{err}");
}

#[test]
fn http_providers_are_accepted_with_their_fields() {
    let f = parse(
        "[provider]\nkind = \"anthropic\"\nmodel = \"claude-x\"\napi_key_env = \"ANTHROPIC_API_KEY\"\nstructured_output = \"tool\"\n",
    )
    .unwrap();
    assert_eq!(f.file.provider.model.as_deref(), Some("claude-x"));
    assert_eq!(f.file.provider.max_retries, 4);
    parse("[provider]\nkind = \"openai\"\nmodel = \"llama\"\nbase_url = \"http://127.0.0.1:8080/v1\"\n")
        .unwrap();
}

#[test]
fn allowed_hosts_compare_without_port_case_brackets_or_final_dot() {
    assert_eq!(host_name("Example.COM.:8080"), "example.com");
    assert_eq!(host_name("[::1]:7474"), "::1");
    assert_eq!(host_name("[::1]"), "::1");
    assert_eq!(host_name("127.0.0.1"), "127.0.0.1");
    assert_eq!(host_name("user@tamp.internal:1"), "tamp.internal");
    let http = HttpConfig {
        allowed_hosts: vec!["Tamp.Internal".into(), "10.0.0.5:7474".into()],
    };
    assert!(http.allows("tamp.internal") && http.allows("10.0.0.5"));
    assert!(!http.allows("evil.example.com"));
    let any = HttpConfig {
        allowed_hosts: vec!["*".into()],
    };
    assert!(any.allows("evil.example.com"));
    assert!(http.validate().is_ok());
    let err = parse("[http]\nallowed_hosts = [\"ok.example\", \"http://x\"]\n").unwrap_err();
    assert!(
        err.message
            .starts_with("http.allowed_hosts: entry 1 (\"http://x\")"),
        "{err}"
    );
    assert_eq!(err.line, Some(2), "{err}");
    for bad in ["", "a b", "x/y"] {
        let http = HttpConfig {
            allowed_hosts: vec![bad.into()],
        };
        assert!(http.validate().is_err(), "{bad}");
    }
}

#[test]
fn provider_errors_name_the_field_and_line() {
    let cases = [
        (
            "kind = \"anthropic\"\napi_key_env = \"K\"\n",
            "provider.model: required when kind = \"anthropic\"",
            1,
        ),
        (
            "kind = \"openai\"\nmodel = \"  \"\n",
            "provider.model: must not be empty",
            3,
        ),
        (
            "kind = \"anthropic\"\nmodel = \"m\"\n",
            "provider.api_key_env: required when kind = \"anthropic\"",
            1,
        ),
        (
            "kind = \"openai\"\nmodel = \"m\"\nstructured_output = \"json\"\n",
            "provider.structured_output: unknown mode \"json\"",
            4,
        ),
        (
            "kind = \"openai\"\nmodel = \"m\"\nstructured_output = \"tool\"\n",
            "provider.structured_output: \"tool\" is for kind = \"anthropic\"",
            4,
        ),
        (
            "kind = \"openai\"\nmodel = \"m\"\nbase_url = \"127.0.0.1:8080\"\n",
            "provider.base_url: must be an http:// or https:// URL",
            4,
        ),
        (
            "kind = \"extractive\"\nmodel = \"m\"\n",
            "provider.model: only for kind = \"anthropic\" or \"openai\"",
            3,
        ),
        (
            "retry_initial_ms = 100\nretry_max_ms = 50\n",
            "provider.retry_max_ms: must be at least retry_initial_ms (50 < 100)",
            3,
        ),
        (
            "timeout_secs = 0\n",
            "provider.timeout_secs: must be a positive number of seconds",
            2,
        ),
        (
            "timeout_secs = inf\n",
            "provider.timeout_secs: must be a positive number of seconds (at least 1 ns), \
             at most 2592000 (30 days), got inf",
            2,
        ),
        (
            "max_concurrency = 0\n",
            "provider.max_concurrency: must be between 1 and 100000, got 0",
            2,
        ),
        (
            "max_concurrency = 9223372036854775807\n",
            "provider.max_concurrency: must be between 1 and 100000",
            2,
        ),
        (
            "kind = \"replay\"\n",
            "provider.answers: required when kind = \"replay\"",
            2,
        ),
        (
            "kind = \"openai\"\nmodel = \"m\"\nanswers = \"a.jsonl\"\n",
            "provider.answers: only for kind = \"replay\"; to write answers to a file, use `record`",
            4,
        ),
        (
            "kind = \"replay\"\nanswers = \"a.jsonl\"\nrecord = \"b.jsonl\"\n",
            "provider.record: not with kind = \"replay\"",
            4,
        ),
        (
            "kind = \"replay\"\nanswers = \"a.jsonl\"\nmodel = \"m\"\n",
            "provider.model: only for kind = \"anthropic\" or \"openai\"",
            4,
        ),
        (
            "kind = \"openai\"\nmodel = \"m\"\nrecord = \"\"\n",
            "provider.record: must not be empty",
            4,
        ),
    ];
    for (body, want, line) in cases {
        let err = parse(&format!("[provider]\n{body}")).unwrap_err();
        assert!(err.message.starts_with(want), "{body}: {err}");
        assert_eq!(err.line, Some(line), "{body}: {err}");
    }
}

#[test]
fn a_provider_is_built_from_its_own_table_and_its_errors_are_located_by_the_file() {
    let file =
        parse("[provider]\nkind = \"scripted\"\n\nscript = \"no-such-script.json\"\n").unwrap();
    let dir = std::env::temp_dir().join(format!("tamp-no-such-dir-{}", std::process::id()));
    // The builder knows no file: the error names the key, and the path from `base_dir`.
    match crate::providers::from_config(&file.file.provider, &dir) {
        Ok(_) => panic!("a missing script builds no provider"),
        Err(e) => {
            assert_eq!((e.table, e.key), ("provider", "script"), "{e}");
            let script = dir.join("no-such-script.json").display().to_string();
            assert!(e.message.contains(&script), "{e}");
        }
    }
    // The chain file puts it at the key's line.
    match file.provider() {
        Ok(_) => panic!("a missing script builds no provider"),
        Err(e) => {
            assert_eq!(e.line, Some(4), "{e}");
            assert!(e.message.starts_with("provider.script: "), "{e}");
        }
    }
}

#[test]
fn record_and_replay_are_accepted_on_their_kinds() {
    let f = parse("[provider]\nkind = \"openai\"\nmodel = \"m\"\nrecord = \"answers.jsonl\"\n")
        .unwrap();
    assert_eq!(
        f.file.provider.record.as_deref(),
        Some(Path::new("answers.jsonl"))
    );
    parse("[provider]\nkind = \"scripted\"\nscript = \"s.json\"\nrecord = \"r.jsonl\"\n").unwrap();
    let f = parse("[provider]\nkind = \"replay\"\nanswers = \"answers.jsonl\"\n").unwrap();
    assert!(!f.file.provider.retries());
    assert!(parse("[provider]\nkind = \"magic\"\n")
        .unwrap_err()
        .message
        .contains("\"openai\" or \"replay\""));
}

#[test]
fn a_key_pasted_into_api_key_env_is_not_echoed() {
    let err = parse(
        "[provider]\nkind = \"anthropic\"\nmodel = \"m\"\napi_key_env = \"sk-ant-api03-secret\"\n",
    )
    .unwrap_err();
    assert!(
        err.message
            .starts_with("provider.api_key_env: must be the name of an environment variable"),
        "{err}"
    );
    assert!(!err.to_string().contains("secret"), "{err}");
}

#[tokio::test]
async fn the_recording_paths_are_relative_to_the_chain_files_folder() {
    let dir = std::env::temp_dir().join(format!("tamp-config-record-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let answers = dir.join("answers.jsonl");
    let chain = dir.join("chain.toml");
    let script = dir.join("script.json");
    std::fs::write(&script, r#"{"default": {"text": "recorded"}}"#).unwrap();
    let recorder = LoadedChainFile::parse(
        &chain,
        "[provider]\nkind = \"scripted\"\nscript = \"script.json\"\nrecord = \"answers.jsonl\"\n"
            .into(),
    )
    .unwrap();
    let provider = recorder.provider().unwrap();
    assert!(!provider.cacheable());
    let request = tamp_plugin_api::LlmRequest::new("", "hello", 10);
    provider.complete(&request).await.unwrap();

    let replayer = LoadedChainFile::parse(
        &chain,
        "[provider]\nkind = \"replay\"\nanswers = \"answers.jsonl\"\n".into(),
    )
    .unwrap();
    let replay = replayer.provider().unwrap();
    assert_eq!(replay.name(), "replay");
    assert_eq!(
        replay.complete(&request).await.unwrap().text.as_str(),
        "recorded"
    );

    std::fs::write(&answers, "{}\n").unwrap();
    let err = match replayer.provider() {
        Ok(_) => panic!("a malformed recording is refused"),
        Err(e) => e,
    };
    assert_eq!(err.line, Some(3), "{err}");
    assert!(
        err.message.starts_with(&format!(
            "provider.answers: {}:1: not a recorded answer",
            answers.display()
        )),
        "{err}"
    );
}

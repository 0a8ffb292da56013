//! The checks, one per rule of [`super::spec::RULES`] plus the performance line. Each runs in
//! its own process (see [`super::child`]) and returns a [`CheckOutput`]. A check reports
//! breaks of its own rule, and breaks of the invariants it sees on its own inputs under the
//! invariant's id (a stage that grows a 5 MB conversation breaks TAMP-INV-06, not
//! TAMP-EDGE-02).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tamp_plugin_api::{Conversation, ErrorKind, Message, Role, StrategyBox};

use super::generate::{
    self, case_seed, extend, generate, round_trip, shrink_candidates, with_huge_message, Case,
    Shape, Text,
};
use super::harness::{
    describe_message, describe_messages, Answers, Harness, KitProvider, Plugin, Run, RunFailure,
    HUGE_PATTERN,
};
use super::report::{CheckOutput, Finding, Perf, PluginFacts};
use super::spec::PERF;
use super::KitOptions;
use tamp_host::chain::Compacted;
use tamp_host::invariants::Violation;
use tamp_host::tokens::{Encoding, TokenCounter};
use tamp_host::wire::WireFormat;

const FORMATS: [WireFormat; 3] = WireFormat::ALL;
/// Shrinking stops after this many candidate runs.
const MAX_SHRINK_RUNS: usize = 300;

/// Runs the check `id` against the plugin `options` names.
pub async fn run_check(id: &str, options: &KitOptions) -> CheckOutput {
    if id == crate::config_args::CHECK {
        return crate::config_args::output(options);
    }
    let plugin = match tamp_host::loader::load_plugin(&options.plugin) {
        Ok(p) => p,
        Err(e) => {
            return CheckOutput {
                findings: vec![Finding::new(
                    if id == "TAMP-LOAD-01" {
                        id
                    } else {
                        "TAMP-LOAD-01"
                    },
                    e.to_string(),
                )],
                ..CheckOutput::default()
            }
        }
    };
    let config = options
        .config
        .clone()
        .unwrap_or_else(|| plugin.meta().default_config.clone());
    let tokens = match TokenCounter::new(Encoding::O200kBase) {
        Ok(t) => Arc::new(t),
        Err(e) => return fail(id, format!("the kit's tokenizer failed to load: {e}")),
    };
    let ctx = Ctx {
        harness: Arc::new(Harness {
            plugin: Plugin::Loaded(plugin),
            config,
            tokens,
            timeout: Duration::from_secs_f64(options.timeout_secs),
        }),
        seed: options.seed,
        cases: options.cases.max(1),
    };
    match id {
        "TAMP-LOAD-01" => ctx.load(),
        "TAMP-META-01" => ctx.metadata(),
        "TAMP-CFG-01" => ctx.schema(),
        "TAMP-CFG-02" => ctx.invalid_configs(),
        "TAMP-INV-01" | "TAMP-INV-02" | "TAMP-INV-03" | "TAMP-INV-04" | "TAMP-INV-06"
        | "TAMP-INV-10" | "TAMP-INV-11" | "TAMP-INV-12" | "TAMP-INV-13" => ctx.invariant(id).await,
        "TAMP-INV-05" => ctx.failure_atomic().await,
        "TAMP-INV-07" => ctx.deterministic().await,
        "TAMP-INV-08" => ctx.prefix_stable().await,
        "TAMP-INV-09" => ctx.bounded().await,
        "TAMP-ERR-01" => ctx.no_panics().await,
        "TAMP-EDGE-01" => ctx.empty().await,
        "TAMP-EDGE-02" => ctx.huge().await,
        "TAMP-EDGE-03" => ctx.unicode().await,
        "TAMP-CONC-01" => ctx.concurrent().await,
        PERF => ctx.perf().await,
        other => fail(other, format!("no such check: {other}")),
    }
}

fn fail(rule: &str, message: String) -> CheckOutput {
    CheckOutput {
        findings: vec![Finding::new(rule, message)],
        ..CheckOutput::default()
    }
}

struct Ctx {
    harness: Arc<Harness>,
    seed: u64,
    cases: usize,
}

/// What makes a case fail, for shrinking.
#[derive(Clone, Copy)]
enum Failing<'a> {
    Breaks(&'a str),
    Panics,
}

impl Ctx {
    fn instance(&self, rule: &str) -> Result<Arc<StrategyBox>, Box<CheckOutput>> {
        self.harness.instance().map_err(|e| {
            Box::new(fail(
                rule,
                format!("the plugin refused the config under test: {e}"),
            ))
        })
    }

    fn case_label(&self, case: &Case, what: &str) -> String {
        format!(
            "{} conversation{what}, case seed {} (rerun: --seed {} --only <rule>)",
            case.format, case.seed, self.seed
        )
    }

    fn load(&self) -> CheckOutput {
        let meta = self.harness.plugin.meta();
        CheckOutput {
            notes: vec![format!(
                "loaded {} {} built against tamp-plugin-api {}",
                meta.name, meta.version, meta.plugin_api_version
            )],
            meta: Some(PluginFacts {
                name: meta.name.clone(),
                version: meta.version.clone(),
                description: meta.description.clone(),
                plugin_api_version: meta.plugin_api_version.clone(),
            }),
            ..CheckOutput::default()
        }
    }

    fn metadata(&self) -> CheckOutput {
        const RULE: &str = "TAMP-META-01";
        let meta = self.harness.plugin.meta();
        let mut out = CheckOutput::default();
        let mut bad = |m: String| out.findings.push(Finding::new(RULE, m));
        if meta.name.trim().is_empty() || meta.name.trim() != meta.name {
            bad(format!(
                "the name {:?} is empty or has surrounding spaces",
                meta.name
            ));
        } else if !meta
            .name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        {
            bad(format!(
                "the name {:?} is not lowercase letters, digits, '-' and '_'",
                meta.name
            ));
        }
        if !is_semver(&meta.version) {
            bad(format!(
                "the version {:?} is not a semver version (MAJOR.MINOR.PATCH)",
                meta.version
            ));
        }
        if meta.description.trim().is_empty() {
            bad(format!("the description {:?} is empty", meta.description));
        }
        if !is_semver(&meta.plugin_api_version) {
            bad(format!(
                "the plugin-api version {:?} is not a semver version",
                meta.plugin_api_version
            ));
        }
        out
    }

    fn schema(&self) -> CheckOutput {
        const RULE: &str = "TAMP-CFG-01";
        let meta = self.harness.plugin.meta();
        let validator = match jsonschema::validator_for(&meta.config_schema) {
            Ok(v) => v,
            Err(e) => {
                return fail(
                    RULE,
                    format!("the config schema is not valid JSON Schema: {e}"),
                )
            }
        };
        let mut out = CheckOutput::default();
        let mut configs = vec![("default config", &meta.default_config)];
        if self.harness.config != meta.default_config {
            configs.push(("config under test", &self.harness.config));
        }
        for (what, config) in configs {
            if let Some(e) = validator.iter_errors(config).next() {
                out.findings.push(Finding::new(
                    RULE,
                    format!(
                        "the {what} {config} does not satisfy the plugin's schema at {}: {e}",
                        pointer(&e.instance_path().to_string())
                    ),
                ));
            }
        }
        if out.findings.is_empty() {
            if let Err(e) = self.harness.plugin.instantiate(&meta.default_config) {
                out.findings.push(Finding::new(
                    RULE,
                    format!(
                        "the default config satisfies the schema but the plugin refuses it: {e}"
                    ),
                ));
            }
        }
        out
    }

    fn invalid_configs(&self) -> CheckOutput {
        const RULE: &str = "TAMP-CFG-02";
        let plugin = &self.harness.plugin;
        let schema = &plugin.meta().config_schema;
        let Ok(validator) = jsonschema::validator_for(schema) else {
            return CheckOutput {
                notes: vec!["skipped: the schema is not valid (see TAMP-CFG-01)".into()],
                ..CheckOutput::default()
            };
        };
        let mut out = CheckOutput::default();
        let base = match &self.harness.config {
            serde_json::Value::Object(map) => map.clone(),
            _ => serde_json::Map::new(),
        };
        // (config, whether it must be refused: the schema rejects its shape or types; range
        // breaks only must not panic, since serde alone cannot see them)
        let mut configs: Vec<(serde_json::Value, bool, String)> = vec![
            (serde_json::json!(42), true, "the number 42".into()),
            (serde_json::json!("not a config"), true, "a string".into()),
            (serde_json::json!([]), false, "an empty array".into()),
        ];
        if schema.get("additionalProperties") == Some(&serde_json::Value::Bool(false)) {
            let mut c = base.clone();
            c.insert("tamp_conformance_unknown_key".into(), serde_json::json!(1));
            configs.push((c.into(), true, "an unknown key".into()));
        }
        let properties = schema
            .get("properties")
            .and_then(|p| p.as_object())
            .cloned()
            .unwrap_or_default();
        for (name, prop) in &properties {
            let wrong = [
                serde_json::json!("tamp-conformance: wrong type"),
                serde_json::json!(0.5),
                serde_json::json!({"tamp_conformance": true}),
            ];
            for value in wrong {
                let mut c = base.clone();
                c.insert(name.clone(), value.clone());
                let c = serde_json::Value::Object(c);
                if !validator.is_valid(&c) {
                    configs.push((c, true, format!("{name} = {value}")));
                    break;
                }
            }
            for (bound, delta) in [("maximum", 1i64), ("minimum", -1)] {
                // schemars writes integer bounds as floats (`100000.0`).
                let limit = prop
                    .get(bound)
                    .and_then(|v| v.as_f64())
                    .filter(|l| l.fract() == 0.0 && l.abs() < 9e15);
                if let Some(limit) = limit.map(|l| l as i64) {
                    let mut c = base.clone();
                    c.insert(name.clone(), serde_json::json!(limit + delta));
                    let c = serde_json::Value::Object(c);
                    if !validator.is_valid(&c) {
                        configs.push((
                            c,
                            false,
                            format!("{name} = {} (out of range)", limit + delta),
                        ));
                    }
                }
            }
        }
        for (config, must_refuse, what) in &configs {
            match plugin.instantiate(config) {
                Err(e) if e.kind == ErrorKind::Panicked => out.findings.push(Finding::new(
                    RULE,
                    format!("the constructor panicked on an invalid config ({what}: {config}): {}", e.message),
                )),
                Ok(_) if *must_refuse => out.findings.push(Finding::new(
                    RULE,
                    format!("an invalid config ({what}: {config}) was accepted; it must be refused with an error"),
                )),
                _ => {}
            }
        }
        out.notes
            .push(format!("{} invalid configs tried", configs.len()));
        out
    }

    async fn run_case(&self, strategy: &StrategyBox, case: &Case, answers: Answers) -> Run {
        self.harness
            .run(strategy, case, KitProvider::new(answers))
            .await
    }

    async fn fails(
        &self,
        strategy: &StrategyBox,
        case: &Case,
        answers: &Answers,
        what: Failing<'_>,
    ) -> bool {
        let run = self.run_case(strategy, case, answers.clone()).await;
        match what {
            Failing::Panics => run.panicked().is_some(),
            Failing::Breaks(rule) => self
                .harness
                .violations(&run)
                .iter()
                .any(|v| v.rule.code() == rule),
        }
    }

    /// The smallest variant of `case` that still fails.
    async fn shrink(
        &self,
        strategy: &StrategyBox,
        case: Case,
        answers: &Answers,
        what: Failing<'_>,
    ) -> Case {
        let mut best = case;
        let mut runs = 0;
        'outer: loop {
            for candidate in shrink_candidates(&best) {
                runs += 1;
                if runs > MAX_SHRINK_RUNS {
                    break 'outer;
                }
                if self.fails(strategy, &candidate, answers, what).await {
                    best = candidate;
                    continue 'outer;
                }
            }
            break;
        }
        best
    }

    /// A finding for `violation` in `run`, with what the plugin returned around the fault.
    fn violation_finding(&self, v: &Violation, run: &Run, what: &str) -> Finding {
        let output = run.changed_output().unwrap_or(&[]);
        let at = v.message_index;
        let mut f = Finding::new(v.rule.code(), v.to_string());
        f.case = Some(self.case_label(&run.case, what));
        f.returned = Some(match &run.outcome {
            // Edits the host refused: what they asked for, against the input.
            Ok(o) if o.broken.is_some() => {
                let lines: Vec<String> = (0..)
                    .zip(&o.edits)
                    .map(|(i, e)| format!("  [{i}] {e}"))
                    .collect();
                format!(
                    "{} edit(s) on {} message(s):\n{}\nin:\n{}",
                    o.edits.len(),
                    run.case.messages.len(),
                    lines.join("\n"),
                    describe_messages(&run.case.messages, at)
                )
            }
            _ => format!(
                "{} message(s) for {} in:\n{}",
                output.len(),
                run.case.messages.len(),
                describe_messages(output, at)
            ),
        });
        f.conversation = small_enough(&run.case);
        f
    }

    /// A property: over generated cases in both formats, the plugin's output keeps `rule`.
    async fn invariant(&self, rule: &str) -> CheckOutput {
        let strategy = match self.instance(rule) {
            Ok(s) => s,
            Err(out) => return *out,
        };
        let answers = Answers::Canned;
        let mut out = CheckOutput::default();
        for format in FORMATS {
            let mut acted = 0;
            let mut errors = 0;
            for i in 0..self.cases {
                let case = generate(case_seed(self.seed, format, i), format, Shape::default());
                let run = self.run_case(&strategy, &case, answers.clone()).await;
                acted += usize::from(run.changed_output().is_some());
                errors += usize::from(run.outcome.is_err());
                if let Some(f) = self.rule_break(&strategy, rule, &run, &answers).await {
                    out.findings.push(f);
                    break;
                }
            }
            out.notes.push(format!(
                "{format}: the plugin changed {acted} of {} conversations ({errors} errors)",
                self.cases
            ));
        }
        out
    }

    /// The finding for `run`'s break of `rule`, if it breaks it: on the smallest variant of
    /// its case that still breaks it, or, when that one keeps the rule once run again, on the
    /// case itself (a plugin that breaks a rule only some of the time breaks it all the same).
    async fn rule_break(
        &self,
        strategy: &StrategyBox,
        rule: &str,
        run: &Run,
        answers: &Answers,
    ) -> Option<Finding> {
        let broken = |run: &Run| {
            self.harness
                .violations(run)
                .into_iter()
                .find(|v| v.rule.code() == rule)
        };
        let v = broken(run)?;
        let small = self
            .shrink(strategy, run.case.clone(), answers, Failing::Breaks(rule))
            .await;
        let again = self.run_case(strategy, &small, answers.clone()).await;
        if let Some(v) = broken(&again) {
            return Some(self.violation_finding(&v, &again, ""));
        }
        let mut f = self.violation_finding(&v, run, "");
        f.message.push_str(
            " (not on the smallest case: run again after shrinking, it kept the rule, so the \
             plugin breaks it only some of the time; this is the case it broke)",
        );
        Some(f)
    }

    /// Invariant breaks and panics in `run`, reported under their own ids.
    fn judge(&self, run: &Run, what: &str, out: &mut CheckOutput) {
        for v in self.harness.violations(run) {
            out.findings.push(self.violation_finding(&v, run, what));
        }
        if let Some(m) = run.panicked() {
            let mut f = Finding::new("TAMP-ERR-01", format!("the plugin panicked: {m}"));
            f.case = Some(self.case_label(&run.case, what));
            out.findings.push(f);
        }
    }

    async fn failure_atomic(&self) -> CheckOutput {
        const RULE: &str = "TAMP-INV-05";
        let strategy = match self.instance(RULE) {
            Ok(s) => s,
            Err(out) => return *out,
        };
        let mut out = CheckOutput::default();
        let n = self.cases.div_ceil(2).max(3);
        let mut tally: BTreeMap<&str, usize> = BTreeMap::new();
        for format in FORMATS {
            for i in 0..n {
                let case = generate(case_seed(self.seed, format, i), format, Shape::default());
                for (answers, what) in [
                    (Answers::Failing, " with every LLM call failing"),
                    (Answers::Garbage, " with garbage LLM answers"),
                ] {
                    let run = self.run_case(&strategy, &case, answers).await;
                    self.judge(&run, what, &mut out);
                    let outcome = match &run.outcome {
                        Err(RunFailure::Timeout(d)) => {
                            let mut f = Finding::new(
                                RULE,
                                format!(
                                    "the plugin returned nothing within {:.1}s",
                                    d.as_secs_f64()
                                ),
                            );
                            f.case = Some(self.case_label(&case, what));
                            out.findings.push(f);
                            "timeout"
                        }
                        Err(_) => "error",
                        Ok(o) if run.changed_output().is_none() => {
                            let _ = o;
                            "unchanged"
                        }
                        Ok(o) => {
                            if run.failed_llm_calls > 0 && o.report.warnings.is_empty() {
                                let mut f = Finding::new(
                                    RULE,
                                    format!(
                                        "the plugin changed the conversation although {} of its {} LLM calls failed, and its report has no warning saying so (report: {:?})",
                                        run.failed_llm_calls,
                                        run.requests.len(),
                                        o.report.reason.as_str()
                                    ),
                                );
                                f.case = Some(self.case_label(&case, what));
                                f.returned =
                                    Some(describe_messages(&o.conversation.messages, None));
                                f.conversation = small_enough(&case);
                                out.findings.push(f);
                            }
                            "changed (reported)"
                        }
                    };
                    *tally.entry(outcome).or_default() += 1;
                }
            }
        }
        out.notes.push(format!("outcomes: {tally:?}"));
        // And through a real one-stage chain: what a caller gets back.
        let case = generate(
            case_seed(self.seed, WireFormat::Anthropic, 0),
            WireFormat::Anthropic,
            Shape::default(),
        );
        if let Some(f) = self.chain_keeps_input(&case).await {
            out.findings.push(f);
        }
        out.findings.dedup();
        out
    }

    /// Runs `case` through a real chain whose LLM always fails: the caller must get the
    /// conversation back unchanged, or changed by a stage that reported the failure. A step
    /// of that run that fails is a finding too: the check would otherwise pass having seen
    /// nothing.
    async fn chain_keeps_input(&self, case: &Case) -> Option<Finding> {
        use tamp_host::chain::StageStatus;
        const RULE: &str = "TAMP-INV-05";
        const WHAT: &str = " through a one-stage chain";
        let finding = |rule: &str, message: String| {
            let mut f = Finding::new(rule, message);
            f.case = Some(self.case_label(case, WHAT));
            f
        };
        let failed = |step: &str, e: String| {
            let unchecked = format!(
                "the run through a one-stage chain whose LLM fails every call did not happen, \
                 so the chain's side of {RULE} is unchecked: {step} failed: {e}"
            );
            // A config the schema refuses is TAMP-CFG-01's failure, and why the chain took no
            // stage (it validates the config first): reported under that rule, not as a
            // second failure of this one.
            if self.config_breaks_schema() {
                const CFG: &str = "TAMP-CFG-01";
                let m = format!(
                    "{CFG}: the config under test does not satisfy the plugin's schema; \
                     {unchecked}"
                );
                finding(CFG, m)
            } else {
                finding(RULE, format!("{RULE}: {unchecked}"))
            }
        };
        let (input, compacted) = match self.through_chain(case).await {
            Ok(done) => done,
            Err((step, e)) => return Some(failed(step, e)),
        };
        let Some(stage) = compacted.report.stages.first() else {
            return Some(failed(
                "reading the chain's report",
                "it names no stage".into(),
            ));
        };
        let changed = compacted.conversation.messages != input.messages;
        if changed
            && (stage.status != StageStatus::Acted
                || (stage.failed_llm_calls > 0 && stage.warnings.is_empty()))
        {
            return Some(finding(RULE, format!(
                "through a chain whose LLM fails every call, the conversation came back changed by a stage that reported {:?} ({} failed LLM calls, no warning)",
                stage.reason, stage.failed_llm_calls
            )));
        }
        None
    }

    /// Whether the config under test breaks the plugin's schema, or the schema is not valid
    /// JSON Schema (both TAMP-CFG-01's failures).
    fn config_breaks_schema(&self) -> bool {
        jsonschema::validator_for(&self.harness.plugin.meta().config_schema)
            .map_or(true, |v| !v.is_valid(&self.harness.config))
    }

    /// `case` compacted by a one-stage chain of the plugin, its LLM failing every call: the
    /// input and what the chain returned, or the step that failed and its error.
    async fn through_chain(
        &self,
        case: &Case,
    ) -> Result<(Conversation, Compacted), (&'static str, String)> {
        use tamp_host::budget::BudgetConfig;
        use tamp_host::chain::{ChainBuilder, CompactOptions};
        use tamp_host::config::Trigger;
        fn step<E: std::fmt::Display>(name: &'static str) -> impl Fn(E) -> (&'static str, String) {
            move |e| (name, e.to_string())
        }
        let plugin = self.harness.plugin.loaded().ok_or((
            "building the stage",
            "the plugin under test is not a loaded library".to_string(),
        ))?;
        let tokens = self.harness.tokens.count_messages(&case.messages);
        let chain = ChainBuilder::new(BudgetConfig {
            max_tokens: (tokens / 2).max(1),
            keep_recent: case.keep_recent,
            ..BudgetConfig::default()
        })
        .provider(KitProvider::new(Answers::Failing))
        .tokens(Arc::clone(&self.harness.tokens))
        .stage(
            "conformance",
            Arc::clone(plugin),
            self.harness.config.clone(),
            Trigger::Always,
            self.harness.timeout,
        )
        .map_err(step("building the stage"))?
        .build()
        .map_err(step("building the chain"))?;
        let input = Conversation::new(case.messages.clone());
        let options = CompactOptions {
            format: Some(case.format),
            force: true,
            budget: None,
            thread_continuity: false,
        };
        let compacted = chain
            .compact(input.clone(), &options)
            .await
            .map_err(step("compacting through the chain"))?;
        Ok((input, compacted))
    }

    async fn deterministic(&self) -> CheckOutput {
        const RULE: &str = "TAMP-INV-07";
        let strategy = match self.instance(RULE) {
            Ok(s) => s,
            Err(out) => return *out,
        };
        let mut out = CheckOutput::default();
        let n = self.cases.div_ceil(2).max(3);
        'formats: for format in FORMATS {
            for i in 0..n {
                let case = generate(case_seed(self.seed, format, i), format, Shape::default());
                let a = self.run_case(&strategy, &case, Answers::Extractive).await;
                let b = self.run_case(&strategy, &case, Answers::Extractive).await;
                if let Some(diff) = difference(&a, &b) {
                    let mut f = Finding::new(RULE, format!("two runs on the same conversation with the same LLM answers differ: {diff}"));
                    f.case = Some(self.case_label(&case, ""));
                    if let Ok(o) = &b.outcome {
                        f.returned = Some(format!(
                            "(second run)\n{}",
                            describe_messages(&o.conversation.messages, None)
                        ));
                    }
                    f.conversation = small_enough(&case);
                    out.findings.push(f);
                    continue 'formats;
                }
            }
        }
        out
    }

    async fn prefix_stable(&self) -> CheckOutput {
        const RULE: &str = "TAMP-INV-08";
        let strategy = match self.instance(RULE) {
            Ok(s) => s,
            Err(out) => return *out,
        };
        let mut out = CheckOutput::default();
        let (mut asked, mut asked_again) = (0, 0);
        for format in FORMATS {
            for i in 0..3 {
                let case = generate(
                    case_seed(self.seed, format, i),
                    format,
                    Shape {
                        min_units: 10,
                        ..Shape::default()
                    },
                );
                let grown = extend(&case, 4, case.seed ^ 0x5EED);
                let a = self.run_case(&strategy, &case, Answers::Extractive).await;
                let b = self.run_case(&strategy, &grown, Answers::Extractive).await;
                let again: Vec<&str> = b.requests.iter().map(|r| r.prompt.as_str()).collect();
                let missing: Vec<_> = a
                    .requests
                    .iter()
                    .filter(|r| !again.contains(&r.prompt.as_str()))
                    .collect();
                asked += a.requests.len();
                asked_again += a.requests.len() - missing.len();
                if let (Some(first), true) = (missing.first(), out.findings.is_empty()) {
                    let prompt: String = first.prompt.chars().take(120).collect();
                    let mut f = Finding::new(
                        RULE,
                        format!(
                            "{} of the {} LLM requests made for the conversation were not made again once it grew by 4 units at its end; the first ({:?}) began {prompt:?}",
                            missing.len(),
                            a.requests.len(),
                            first.label.as_str()
                        ),
                    );
                    f.case = Some(self.case_label(&case, ""));
                    out.findings.push(f);
                }
            }
        }
        out.notes.push(format!(
            "{asked_again} of {asked} requests were made again after the conversation grew"
        ));
        out
    }

    async fn bounded(&self) -> CheckOutput {
        const RULE: &str = "TAMP-INV-09";
        const ANSWER_CHARS: usize = 200_000;
        const LIMIT_CHARS: usize = ANSWER_CHARS / 4;
        let strategy = match self.instance(RULE) {
            Ok(s) => s,
            Err(out) => return *out,
        };
        let mut out = CheckOutput::default();
        for format in FORMATS {
            let case = generate(case_seed(self.seed, format, 0), format, Shape::default());
            let case = with_huge_message(&case, 400_000);
            let what = " with a 400 kB message and 200,000-character LLM answers";
            let run = self
                .run_case(&strategy, &case, Answers::Huge(ANSWER_CHARS))
                .await;
            self.judge(&run, what, &mut out);
            let Some(output) = run.changed_output() else {
                continue;
            };
            // Any LIMIT_CHARS-long stretch of the answer, whatever its starting point.
            let stretches: Vec<String> = (0..HUGE_PATTERN.len())
                .map(|offset| {
                    HUGE_PATTERN
                        .chars()
                        .cycle()
                        .skip(offset)
                        .take(LIMIT_CHARS)
                        .collect()
                })
                .collect();
            for (j, m) in output.iter().enumerate() {
                let text = m.joined_text();
                if !case.messages.contains(m) && stretches.iter().any(|s| text.contains(s.as_str()))
                {
                    let mut f = Finding::new(
                        RULE,
                        format!(
                            "output message {j} is new and carries more than {LIMIT_CHARS} characters of the LLM's {ANSWER_CHARS}-character answer ({} characters in all): a stage must cap LLM text before it enters the conversation",
                            text.chars().count()
                        ),
                    );
                    f.case = Some(self.case_label(&case, what));
                    f.returned = Some(format!("  [{j}] {}", describe_message(m)));
                    out.findings.push(f);
                    break;
                }
            }
        }
        out
    }

    async fn no_panics(&self) -> CheckOutput {
        const RULE: &str = "TAMP-ERR-01";
        let strategy = match self.instance(RULE) {
            Ok(s) => s,
            Err(out) => return *out,
        };
        let mut out = CheckOutput::default();
        for format in FORMATS {
            for i in 0..self.cases {
                let case = generate(case_seed(self.seed, format, i), format, Shape::default());
                let run = self.run_case(&strategy, &case, Answers::Canned).await;
                if run.panicked().is_none() {
                    continue;
                }
                let small = self
                    .shrink(&strategy, case, &Answers::Canned, Failing::Panics)
                    .await;
                let run = self.run_case(&strategy, &small, Answers::Canned).await;
                let mut f = Finding::new(
                    RULE,
                    format!(
                        "the plugin panicked: {}",
                        run.panicked().unwrap_or("(not on the smallest case)")
                    ),
                );
                f.case = Some(self.case_label(&small, ""));
                f.conversation = small_enough(&small);
                out.findings.push(f);
                break;
            }
        }
        out
    }

    async fn empty(&self) -> CheckOutput {
        self.empty_read_back(round_trip).await
    }

    /// EDGE-01, with `read_back` writing a conversation in a wire format and reading it back
    /// ([`round_trip`]; the kit's tests put one in that refuses). A conversation that does not
    /// survive it is skipped with a note, and a format where none does fails the rule: the
    /// rule would pass there having tested nothing.
    async fn empty_read_back(
        &self,
        read_back: fn(Vec<Message>, WireFormat) -> Option<Vec<Message>>,
    ) -> CheckOutput {
        const RULE: &str = "TAMP-EDGE-01";
        let strategy = match self.instance(RULE) {
            Ok(s) => s,
            Err(out) => return *out,
        };
        let mut out = CheckOutput::default();
        for format in FORMATS {
            let conversations: [(&str, Vec<Message>); 3] = [
                ("an empty conversation", vec![]),
                (
                    "a system prompt alone",
                    vec![Message::text(Role::System, "You are terse.")],
                ),
                (
                    "a system prompt and one user message",
                    vec![
                        Message::text(Role::System, "You are terse."),
                        Message::text(Role::User, "hi"),
                    ],
                ),
            ];
            let mut ran = 0;
            for (what, messages) in conversations {
                let Some(messages) = read_back(messages, format) else {
                    out.notes.push(format!(
                        "{RULE}: {what} skipped in {format}: it does not survive being written \
                         in {format} and read back"
                    ));
                    continue;
                };
                ran += 1;
                let case = Case {
                    seed: 0,
                    format,
                    messages,
                    keep_recent: 1,
                    prior_pages: Vec::new(),
                };
                let run = self.run_case(&strategy, &case, Answers::Canned).await;
                let label = format!(": {what}");
                let problem = match &run.outcome {
                    Err(RunFailure::Panicked(m)) => Some(format!("the plugin panicked on {what}: {m}")),
                    Err(RunFailure::Timeout(d)) => Some(format!("the plugin returned nothing within {:.1}s for {what}", d.as_secs_f64())),
                    Err(RunFailure::Error(_)) => None,
                    Ok(o) if case.messages.len() < 2 && o.conversation.messages[..] != case.messages[..] => Some(format!(
                        "for {what} the plugin returned {} message(s) instead of the conversation unchanged",
                        o.conversation.messages.len()
                    )),
                    Ok(_) => None,
                };
                if let Some(p) = problem {
                    let mut f = Finding::new(RULE, p);
                    f.case = Some(self.case_label(&case, &label));
                    if let Ok(o) = &run.outcome {
                        f.returned = Some(describe_messages(&o.conversation.messages, None));
                    }
                    out.findings.push(f);
                    // One time limit spent is enough: each further case would spend another,
                    // and the check's process has a limit of its own.
                    if matches!(run.outcome, Err(RunFailure::Timeout(_))) {
                        return out;
                    }
                } else {
                    for v in self.harness.violations(&run) {
                        out.findings.push(self.violation_finding(&v, &run, &label));
                    }
                }
            }
            if ran == 0 {
                out.findings.push(Finding::new(
                    RULE,
                    format!(
                        "{RULE}: no case ran in {format}: none of its conversations survives \
                         being written in {format} and read back, so the rule is unchecked there"
                    ),
                ));
            }
        }
        out
    }

    async fn huge(&self) -> CheckOutput {
        const RULE: &str = "TAMP-EDGE-02";
        let strategy = match self.instance(RULE) {
            Ok(s) => s,
            Err(out) => return *out,
        };
        let mut out = CheckOutput::default();
        let format = WireFormat::Anthropic;
        let case = generate(case_seed(self.seed, format, 0), format, Shape::default());
        let case = with_huge_message(&case, 5 * 1024 * 1024);
        let what = " with a 5 MB message";
        // An extreme input gets three compaction time limits.
        let harness = Harness {
            plugin: self.harness.plugin.clone(),
            config: self.harness.config.clone(),
            tokens: Arc::clone(&self.harness.tokens),
            timeout: self.harness.timeout * 3,
        };
        let run = harness
            .run(&strategy, &case, KitProvider::new(Answers::Canned))
            .await;
        match &run.outcome {
            Err(RunFailure::Panicked(m)) => {
                let mut f =
                    Finding::new(RULE, format!("the plugin panicked on a 5 MB message: {m}"));
                f.case = Some(self.case_label(&case, what));
                out.findings.push(f);
            }
            Err(RunFailure::Timeout(d)) => {
                let mut f = Finding::new(RULE, format!("the plugin returned nothing within {:.1}s for a conversation with a 5 MB message", d.as_secs_f64()));
                f.case = Some(self.case_label(&case, what));
                out.findings.push(f);
            }
            _ => {
                for v in self.harness.violations(&run) {
                    out.findings.push(self.violation_finding(&v, &run, what));
                }
            }
        }
        out.notes.push(format!(
            "{:.0} ms for {} tokens; {}",
            run.elapsed.as_secs_f64() * 1e3,
            run.tokens_before,
            match &run.outcome {
                Ok(o) => format!(
                    "{} → {} messages",
                    case.messages.len(),
                    o.conversation.messages.len()
                ),
                Err(e) => e.to_string(),
            }
        ));
        out
    }

    async fn unicode(&self) -> CheckOutput {
        const RULE: &str = "TAMP-EDGE-03";
        let strategy = match self.instance(RULE) {
            Ok(s) => s,
            Err(out) => return *out,
        };
        let mut out = CheckOutput::default();
        let shape = Shape {
            text: Text::Unicode,
            ..Shape::default()
        };
        let n = self.cases.div_ceil(2).max(3);
        'formats: for format in FORMATS {
            for i in 0..n {
                let case = generate(case_seed(self.seed ^ 0x00C0_DE00, format, i), format, shape);
                let run = self.run_case(&strategy, &case, Answers::Canned).await;
                if run.panicked().is_some() {
                    let small = self
                        .shrink(&strategy, case, &Answers::Canned, Failing::Panics)
                        .await;
                    let run = self.run_case(&strategy, &small, Answers::Canned).await;
                    let mut f = Finding::new(
                        RULE,
                        format!(
                            "the plugin panicked on Unicode text: {}",
                            run.panicked().unwrap_or("(not on the smallest case)")
                        ),
                    );
                    f.case = Some(self.case_label(&small, " of Unicode text"));
                    f.conversation = small_enough(&small);
                    out.findings.push(f);
                    continue 'formats;
                }
                let violations = self.harness.violations(&run);
                for v in &violations {
                    out.findings
                        .push(self.violation_finding(v, &run, " of Unicode text"));
                }
                // (Output that breaks an invariant is that rule's failure, not this one's.)
                if let (Some(output), true) = (run.changed_output(), violations.is_empty()) {
                    if round_trip(output.to_vec(), format).as_deref() != Some(output) {
                        let mut f = Finding::new(RULE, "the output does not survive being written to its wire format and read back");
                        f.case = Some(self.case_label(&case, " of Unicode text"));
                        out.findings.push(f);
                    }
                }
            }
        }
        out
    }

    async fn concurrent(&self) -> CheckOutput {
        const RULE: &str = "TAMP-CONC-01";
        const TASKS: usize = 24;
        let strategy = match self.instance(RULE) {
            Ok(s) => s,
            Err(out) => return *out,
        };
        let mut out = CheckOutput::default();
        let cases: Vec<Case> = (0..TASKS)
            .map(|i| {
                let format = FORMATS[i % 2];
                generate(
                    case_seed(self.seed ^ 0xC0C0, format, i),
                    format,
                    Shape::default(),
                )
            })
            .collect();
        // A short LLM delay gives every task an await point where the others run.
        let delayed = || KitProvider::with_delay(Answers::Canned, Duration::from_millis(2));
        let mut alone = Vec::new();
        for case in &cases {
            alone.push(self.harness.run(&strategy, case, delayed()).await);
        }
        let handles: Vec<_> = cases
            .iter()
            .cloned()
            .map(|case| {
                let harness = Arc::clone(&self.harness);
                let strategy = Arc::clone(&strategy);
                tokio::spawn(async move { harness.run(&strategy, &case, delayed()).await })
            })
            .collect();
        for (i, handle) in handles.into_iter().enumerate() {
            let Ok(together) = handle.await else {
                out.findings
                    .push(Finding::new(RULE, format!("task {i} failed")));
                continue;
            };
            let solo = &alone[i];
            let solo_rules: Vec<&str> = self
                .harness
                .violations(solo)
                .iter()
                .map(|v| v.rule.code())
                .collect();
            let what = format!(" run as one of {TASKS} concurrent calls on one instance");
            for v in self.harness.violations(&together) {
                if !solo_rules.contains(&v.rule.code()) {
                    let mut f = self.violation_finding(&v, &together, &what);
                    f.rule = RULE.to_string();
                    f.message = format!("under concurrency only: {v}");
                    out.findings.push(f);
                }
            }
            if let (Some(m), None) = (together.panicked(), solo.panicked()) {
                let mut f = Finding::new(RULE, format!("panicked under concurrency only: {m}"));
                f.case = Some(self.case_label(&together.case, &what));
                out.findings.push(f);
            }
            if let Some(diff) = difference(solo, &together) {
                // Only a deterministic plugin's difference is the concurrency's fault.
                let again = self.harness.run(&strategy, &cases[i], delayed()).await;
                if difference(solo, &again).is_none() && out.findings.iter().all(|f| f.rule != RULE)
                {
                    let mut f = Finding::new(
                        RULE,
                        format!(
                            "the output under concurrency differs from the same call alone: {diff}"
                        ),
                    );
                    f.case = Some(self.case_label(&together.case, &what));
                    if let Ok(o) = &together.outcome {
                        f.returned = Some(describe_messages(&o.conversation.messages, None));
                    }
                    out.findings.push(f);
                }
            }
        }
        out.findings.truncate(3);
        out
    }

    async fn perf(&self) -> CheckOutput {
        const RUNS: usize = 3;
        let strategy = match self.instance(PERF) {
            Ok(s) => s,
            Err(out) => return *out,
        };
        let case = generate::generate_messages(self.seed, WireFormat::Anthropic, 1000);
        let case = Case {
            keep_recent: 10,
            ..case
        };
        let mut runs = Vec::new();
        for _ in 0..RUNS {
            runs.push(self.run_case(&strategy, &case, Answers::Canned).await);
        }
        let mut plugin: Vec<f64> = runs
            .iter()
            .map(|r| r.elapsed.saturating_sub(r.llm_time).as_secs_f64() * 1e3)
            .collect();
        let mut llm: Vec<f64> = runs
            .iter()
            .map(|r| r.llm_time.as_secs_f64() * 1e3)
            .collect();
        plugin.sort_by(f64::total_cmp);
        llm.sort_by(f64::total_cmp);
        let last = &runs[RUNS - 1];
        let tokens_after = match &last.outcome {
            Ok(o) => self.harness.tokens.count_messages(&o.conversation.messages),
            Err(_) => last.tokens_before,
        };
        let mut out = CheckOutput {
            perf: Some(Perf {
                messages: case.messages.len(),
                tokens_before: last.tokens_before,
                tokens_after,
                runs: RUNS,
                plugin_ms: plugin[RUNS / 2],
                llm_ms: llm[RUNS / 2],
                llm_calls: last.requests.len(),
            }),
            ..CheckOutput::default()
        };
        if let Err(e) = &last.outcome {
            out.notes
                .push(format!("on the 1,000-message conversation the plugin {e}"));
        }
        out
    }
}

/// How two runs of the same case differ, if they do.
fn difference(a: &Run, b: &Run) -> Option<String> {
    match (&a.outcome, &b.outcome) {
        (Ok(x), Ok(y)) => {
            let (x, y) = (&x.conversation.messages, &y.conversation.messages);
            if x.len() != y.len() {
                return Some(format!("{} output messages, then {}", x.len(), y.len()));
            }
            if let Some(k) = (0..x.len()).find(|&k| x[k] != y[k]) {
                return Some(format!(
                    "output message {k} was {} and then {}",
                    describe_message(&x[k]),
                    describe_message(&y[k])
                ));
            }
        }
        (Err(x), Err(y)) if std::mem::discriminant(x) == std::mem::discriminant(y) => {}
        (x, y) => {
            let show = |r: &Result<super::harness::Outcome, RunFailure>| match r {
                Ok(_) => "an output".to_string(),
                Err(e) => e.to_string(),
            };
            return Some(format!("first {}, then {}", show(x), show(y)));
        }
    }
    let prompts = |r: &Run| {
        let mut p: Vec<(String, String)> = r
            .requests
            .iter()
            .map(|q| (q.system.to_string(), q.prompt.to_string()))
            .collect();
        p.sort();
        p
    };
    if prompts(a) != prompts(b) {
        return Some(format!(
            "the LLM requests differ ({} and {} requests)",
            a.requests.len(),
            b.requests.len()
        ));
    }
    None
}

/// The case as a wire request, unless it is too big to print.
fn small_enough(case: &Case) -> Option<serde_json::Value> {
    let value = case.to_wire();
    (value.to_string().len() <= 64 * 1024).then_some(value)
}

fn pointer(p: &str) -> &str {
    if p.is_empty() {
        "/"
    } else {
        p
    }
}

/// `MAJOR.MINOR.PATCH` with optional `-pre` and `+build` (SemVer 2.0, as cargo reads it).
fn is_semver(v: &str) -> bool {
    semver::Version::parse(v).is_ok()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::json;
    use tamp_plugin_api::prelude::{
        CompactOutcome, Compaction, Deserialize, Edit, JsonSchema, PluginError, Serialize,
        StageReport, Strategy,
    };

    use super::*;

    #[derive(Default, Serialize, Deserialize, JsonSchema)]
    #[serde(default, deny_unknown_fields)]
    #[schemars(crate = "tamp_plugin_api::schemars")]
    struct BreakerConfig {
        /// How many of its first calls break the rule (none: every call).
        breaks: Option<usize>,
    }

    /// A fake plugin that breaks TAMP-INV-04 (an edit past the conversation's end) on its
    /// first `breaks` calls, and leaves the conversation unchanged on the others.
    struct Breaker {
        breaks: Option<usize>,
        calls: AtomicUsize,
    }

    impl Strategy for Breaker {
        type Config = BreakerConfig;
        const NAME: &'static str = "breaker";
        const DESCRIPTION: &'static str = "Test fake: breaks TAMP-INV-04 as often as told.";

        fn new(config: BreakerConfig) -> Result<Self, PluginError> {
            Ok(Breaker {
                breaks: config.breaks,
                calls: AtomicUsize::new(0),
            })
        }

        async fn compact(&self, input: Compaction) -> Result<CompactOutcome, PluginError> {
            let call = self.calls.fetch_add(1, Ordering::SeqCst);
            if self.breaks.is_some_and(|n| call >= n) {
                return Ok(CompactOutcome::unchanged("not this time"));
            }
            let end = input.conversation.messages.len() + 1;
            Ok(CompactOutcome::with_edits(
                [Edit::summarize(0..end, "past the end")],
                StageReport::acted("summarized one message too many"),
            ))
        }
    }

    /// The checks against the fake plugin `S` built in this process, with `config`.
    fn ctx<S: Strategy>(config: serde_json::Value) -> Ctx {
        Ctx {
            harness: Arc::new(Harness {
                plugin: Plugin::in_process::<S>(),
                config,
                tokens: Arc::new(TokenCounter::new(Encoding::O200kBase).unwrap()),
                timeout: Duration::from_secs(10),
            }),
            seed: 1,
            cases: 2,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rule_broken_only_some_of_the_time_is_reported_on_the_case_it_broke() {
        // Broken on the first call only: the shrunk case, run again, keeps the rule.
        let out = ctx::<Breaker>(json!({"breaks": 1}))
            .invariant("TAMP-INV-04")
            .await;
        assert_eq!(out.findings.len(), 1, "{out:?}");
        let f = &out.findings[0];
        assert_eq!(f.rule, "TAMP-INV-04");
        assert!(
            f.message.starts_with("TAMP-INV-04") && f.message.contains("not on the smallest case"),
            "{f:?}"
        );
        let first = generate(case_seed(1, FORMATS[0], 0), FORMATS[0], Shape::default());
        assert_eq!(f.conversation, small_enough(&first), "the case it broke on");

        // Broken every time: each format's smallest case, and no such note.
        let out = ctx::<Breaker>(json!({})).invariant("TAMP-INV-04").await;
        assert_eq!(out.findings.len(), FORMATS.len(), "{out:?}");
        for f in &out.findings {
            assert!(!f.message.contains("not on the smallest case"), "{f:?}");
            let shrunk = f.conversation.as_ref().unwrap().to_string();
            assert!(shrunk.len() < first.to_wire().to_string().len(), "{f:?}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_step_of_the_chain_run_that_fails_is_a_finding() {
        // A plugin built in this process cannot be a chain's stage: the first step fails.
        let format = WireFormat::Anthropic;
        let case = generate(case_seed(1, format, 0), format, Shape::default());
        let f = ctx::<Breaker>(json!({"breaks": 0}))
            .chain_keeps_input(&case)
            .await
            .expect("a failed step is a finding, not a pass");
        assert_eq!(f.rule, "TAMP-INV-05");
        assert!(
            f.message.starts_with("TAMP-INV-05: ")
                && f.message.ends_with(
                    "building the stage failed: the plugin under test is not a loaded library"
                ),
            "{f:?}"
        );
        let label = f.case.as_deref().unwrap();
        assert!(label.contains("through a one-stage chain"), "{label}");

        // A config the schema refuses is why no chain takes the stage: TAMP-CFG-01's failure.
        let f = ctx::<Breaker>(json!({"breaks": "often"}))
            .chain_keeps_input(&case)
            .await
            .expect("a finding");
        assert_eq!(f.rule, "TAMP-CFG-01");
        assert!(
            f.message.starts_with(
                "TAMP-CFG-01: the config under test does not satisfy the plugin's schema; the \
                 run through a one-stage chain"
            ),
            "{f:?}"
        );
    }

    /// Writes and reads back only conversations of two messages or more.
    fn refuses_short(messages: Vec<Message>, format: WireFormat) -> Option<Vec<Message>> {
        (messages.len() >= 2)
            .then(|| round_trip(messages, format))
            .flatten()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn edge_01_notes_each_skipped_case_and_fails_where_none_ran() {
        let keeps = ctx::<Breaker>(json!({"breaks": 0}));
        // Every wire format carries all three conversations: none is skipped.
        let out = keeps.empty().await;
        assert!(out.findings.is_empty(), "{out:?}");
        assert!(out.notes.is_empty(), "{out:?}");

        // The empty conversation and the lone system prompt skipped: a note for each.
        let out = keeps.empty_read_back(refuses_short).await;
        assert!(out.findings.is_empty(), "{out:?}");
        assert_eq!(out.notes.len(), 2 * FORMATS.len(), "{out:?}");
        assert!(
            out.notes.iter().any(|n| n
                == "TAMP-EDGE-01: an empty conversation skipped in anthropic: it does not \
                    survive being written in anthropic and read back"),
            "{out:?}"
        );

        // Nothing survives: nothing was checked, so the rule fails in every format.
        let out = keeps.empty_read_back(|_, _| None).await;
        assert_eq!(out.notes.len(), 3 * FORMATS.len(), "{out:?}");
        assert_eq!(out.findings.len(), FORMATS.len(), "{out:?}");
        assert!(
            out.findings
                .iter()
                .all(|f| f.rule == "TAMP-EDGE-01" && f.message.contains(": no case ran in ")),
            "{out:?}"
        );
    }

    #[test]
    fn semver() {
        assert!(is_semver("0.1.0"));
        assert!(is_semver("1.22.3-beta.1+build5"));
        assert!(!is_semver("1.2"));
        assert!(!is_semver("01.2.3"));
        assert!(!is_semver("v1.2.3"));
    }
}

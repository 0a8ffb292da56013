//! `tamp eval --probe JUDGE`: retention judged by a model. Each fact with a `question` is asked
//! of the judge twice: from the original conversation (the reference answer, once per
//! conversation) and from a run's final context. The fact is kept when the two answers say the
//! same ([`same_answer`]). A question the judge cannot answer from the original either is
//! *unanswerable*: it says nothing about the chain, so it is reported and left out of the
//! share.
//!
//! String matching (`text`, `all`) sees whether words survived; the probe sees whether the
//! compacted context still answers what the original did, in other words.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use serde::Serialize;
use tamp_plugin_api::{FfiOption, LlmRequest, Message};

use super::facts::{self, Fact};
use crate::config::LoadedChainFile;
use crate::providers::{self, Provider};

/// What the judge answers when the context does not say.
pub const UNKNOWN: &str = "unknown";

const SYSTEM: &str = "You answer questions about a conversation between a user and an AI \
    assistant, from what the conversation says and nothing else.";

/// The longest answer asked for: a few words, so two answers compare word for word.
const MAX_ANSWER_TOKENS: u32 = 48;

/// The judge: the `[provider]` of a chain file (its stages are not run).
pub struct Judge {
    provider: Arc<dyn Provider>,
}

impl Judge {
    /// Reads the judge's chain file and builds its provider. The offline extractive
    /// summarizer answers no question, so it is refused.
    pub fn from_file(path: &Path) -> anyhow::Result<Judge> {
        let file = LoadedChainFile::read(path).map_err(|e| anyhow::anyhow!("{e}"))?;
        if !file.file.provider.kind.answers_questions() {
            anyhow::bail!(
                "{}: --probe: the judge's [provider] kind is \"{}\"; a judge must be a model \
                 (\"anthropic\" or \"openai\"), or a recording of one (\"replay\")",
                path.display(),
                file.file.provider.kind
            );
        }
        let provider = file.provider().map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(Judge { provider })
    }

    /// The same judge, its provider wrapped (`tamp eval` hears of each of its calls).
    pub fn wrapped(&self, wrap: &crate::chain::ProviderWrap) -> Judge {
        Judge {
            provider: wrap(Arc::clone(&self.provider)),
        }
    }

    #[cfg(test)]
    pub fn with_provider(provider: Arc<dyn Provider>) -> Judge {
        Judge { provider }
    }

    /// The judge's answer to `question` from `context`, trimmed.
    pub async fn answer(
        &self,
        context: &[Message],
        question: &str,
        label: &str,
    ) -> anyhow::Result<String> {
        let request = request(context, question, label);
        let answer = self
            .provider
            .complete(&request)
            .await
            .map_err(|e| anyhow::anyhow!("the judge ({}): {label}: {e}", self.provider.name()))
            .context("--probe")?;
        Ok(answer.text.trim().to_string())
    }
}

/// The question put to the judge: the context as a summarizer reads it, then the question.
fn request(context: &[Message], question: &str, label: &str) -> LlmRequest {
    let mut prompt = providers::wrap_content(&facts::render_context(context));
    prompt.push_str(&format!(
        "\n\nQuestion: {question}\n\nAnswer with the exact words, names, ids, paths or numbers \
         the conversation above uses, in at most 12 words and nothing else. If the \
         conversation does not say, answer exactly: {UNKNOWN}"
    ));
    let mut request = LlmRequest::new(SYSTEM, prompt, MAX_ANSWER_TOKENS).with_label(label);
    request.temperature = FfiOption::RSome(0.0);
    request
}

/// An answer reduced to what two phrasings of it share: lowercase words and numbers, quotes,
/// backticks and closing punctuation gone, articles dropped.
pub fn normalize(answer: &str) -> String {
    answer
        .to_lowercase()
        .split(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '*' | ','))
        .map(|w| w.trim_matches(|c: char| matches!(c, '.' | ':' | ';' | '!' | '?' | '(' | ')')))
        .filter(|w| !w.is_empty() && !matches!(*w, "a" | "an" | "the"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether `answer` says what `reference` does: equal once normalized, or one holding the
/// other whole (a judge may answer `match.c` once and `src/libponyc/expr/match.c` once).
/// "unknown" is never the same as anything.
pub fn same_answer(reference: &str, answer: &str) -> bool {
    let (r, a) = (normalize(reference), normalize(answer));
    if r.is_empty() || a.is_empty() || r == UNKNOWN || a == UNKNOWN {
        return false;
    }
    r == a || contains_words(&r, &a) || contains_words(&a, &r)
}

/// Whether the words of `inner` appear in `outer` in a row, and `inner` is not a lone short
/// word (`is`, `no`) that would match anything.
fn contains_words(outer: &str, inner: &str) -> bool {
    if inner.len() < 3 {
        return false;
    }
    let (o, i): (Vec<&str>, Vec<&str>) = (outer.split(' ').collect(), inner.split(' ').collect());
    o.windows(i.len()).any(|w| w == i.as_slice())
        || (i.len() == 1 && o.iter().any(|w| w.ends_with(&format!("/{}", i[0]))))
}

/// The reference answers of a conversation's questions, asked once from the original.
#[derive(Debug, Clone)]
pub struct References {
    /// (fact id, question, answer), in facts-file order.
    pub answers: Vec<(String, String, String)>,
}

impl References {
    pub async fn ask(
        judge: &Judge,
        conversation: &str,
        original: &[Message],
        facts: &[Fact],
    ) -> anyhow::Result<References> {
        let mut answers = Vec::new();
        for fact in facts {
            let Some(question) = &fact.question else {
                continue;
            };
            let label = format!("probe {conversation}/{}: original", fact.id);
            let answer = judge.answer(original, question, &label).await?;
            answers.push((fact.id.clone(), question.clone(), answer));
        }
        Ok(References { answers })
    }
}

/// One question's outcome in a run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Probed {
    pub id: String,
    pub reference: String,
    pub answer: String,
}

/// A run's probe: questions answered the same from the final context as from the original.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ProbeResult {
    /// Answered the same.
    pub same: usize,
    /// Questions the original answers (the share's denominator).
    pub answerable: usize,
    /// The ids of the questions the original does not answer either.
    pub unanswerable: Vec<String>,
    /// The questions answered otherwise (or not) from the final context.
    pub differed: Vec<Probed>,
}

impl ProbeResult {
    pub fn share(&self) -> f64 {
        if self.answerable == 0 {
            1.0
        } else {
            self.same as f64 / self.answerable as f64
        }
    }

    /// Asks `references`' answerable questions of `context`, a run's final context.
    pub async fn ask(
        judge: &Judge,
        references: &References,
        context: &[Message],
        run_label: &str,
    ) -> anyhow::Result<ProbeResult> {
        let mut result = ProbeResult {
            same: 0,
            answerable: 0,
            unanswerable: Vec::new(),
            differed: Vec::new(),
        };
        for (id, question, reference) in &references.answers {
            let normalized = normalize(reference);
            if normalized == UNKNOWN || normalized.is_empty() {
                result.unanswerable.push(id.clone());
                continue;
            }
            result.answerable += 1;
            let answer = judge
                .answer(context, question, &format!("probe {run_label}/{id}"))
                .await?;
            if same_answer(reference, &answer) {
                result.same += 1;
            } else {
                result.differed.push(Probed {
                    id: id.clone(),
                    reference: reference.clone(),
                    answer,
                });
            }
        }
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::ScriptedProvider;
    use tamp_plugin_api::Role;

    #[test]
    fn answers_compare_by_their_words_not_their_punctuation() {
        assert!(same_answer("`src/match.c`.", "src/match.c"));
        assert!(same_answer("The reservation 4WQ150", "reservation 4wq150"));
        assert!(same_answer("match.c", "src/libponyc/expr/match.c"));
        assert!(same_answer("Economy, 2 bags", "economy 2 bags"));
        assert!(!same_answer("economy", "business"));
        assert!(!same_answer("unknown", "unknown"));
        assert!(!same_answer("4WQ150", "Unknown."));
        // A lone short word does not match every answer that holds it.
        assert!(!same_answer("no", "no, it was not refunded"));
        assert!(!same_answer("", "x"));
    }

    fn fact(id: &str, question: &str) -> Fact {
        Fact {
            id: id.into(),
            kind: None,
            text: None,
            all: Vec::new(),
            message: None,
            question: Some(question.into()),
        }
    }

    #[tokio::test]
    async fn a_question_the_original_cannot_answer_is_left_out_of_the_share() {
        // The judge answers from what it is shown: the scripted answers match on the context.
        let script = serde_json::json!({
            "mode": "match",
            "responses": [
                {"match": "Which cabin?\n", "text": "economy"},
                {"match": "Which seat?\n", "text": "unknown"},
                {"match": "Which flight?\n", "text": "HAT170"}
            ]
        });
        let provider =
            ScriptedProvider::from_script(serde_json::from_value(script).unwrap()).unwrap();
        let judge = Judge::with_provider(Arc::new(provider));
        let original = vec![Message::text(Role::User, "Book HAT170 in economy.")];
        let facts = [
            fact("cabin", "Which cabin?"),
            fact("seat", "Which seat?"),
            fact("flight", "Which flight?"),
        ];
        let references = References::ask(&judge, "c", &original, &facts)
            .await
            .unwrap();
        assert_eq!(references.answers.len(), 3);
        let result = ProbeResult::ask(&judge, &references, &original, "c/run")
            .await
            .unwrap();
        assert_eq!((result.same, result.answerable), (2, 2));
        assert_eq!(result.unanswerable, ["seat"]);
        assert!((result.share() - 1.0).abs() < 1e-9);
    }

    #[test]
    fn the_question_follows_the_context_and_asks_for_few_exact_words() {
        let context = vec![Message::text(Role::User, "Book HAT170.")];
        let request = request(&context, "Which flight?", "probe x");
        let prompt = request.prompt.as_str();
        assert_eq!(
            providers::content_section(prompt).trim(),
            facts::render_context(&context).trim()
        );
        assert!(prompt.contains("Question: Which flight?") && prompt.contains("unknown"));
        assert_eq!(request.temperature, FfiOption::RSome(0.0));
    }
}

//! One compaction through a built chain, as most strategy tests make one: the default
//! options, the whole conversation, and the first stage's part of its report.

use tamp_host::chain::{Chain, CompactOptions, Compacted, StageRun};
use tamp_plugin_api::Conversation;

use crate::rt;

/// `input` compacted by `chain` with the default options; a chain error fails the test.
pub fn compact(chain: &Chain, input: &Conversation) -> Compacted {
    rt().block_on(chain.compact(input.clone(), &CompactOptions::default()))
        .expect("compacts")
}

/// The first stage's part of the report.
pub fn stage(out: &Compacted) -> &StageRun {
    &out.report.stages[0]
}

//! Whose the pages a request's compaction writes are: the keyed hash of the credential the
//! request carried (see [`crate::store::search`]), recorded beside the pages so that the MCP
//! server at `/tamp/mcp` gives each credential its own pages and no other's.

use axum::http::HeaderMap;
use tokio::sync::OnceCell;

use crate::chain::ChainReport;
use crate::http::active::ActiveChain;
use crate::mcp::credential;
use crate::store::search::owner_of_credential;

/// The owner of a request's pages, from its headers; the store's key read once.
pub struct Owners {
    key: OnceCell<Vec<u8>>,
    /// The proxy's own bearer token takes `Authorization` on `/tamp/mcp`: see
    /// [`crate::mcp::credential`]. Provider requests never carry it.
    own_token: bool,
}

impl Owners {
    pub fn new(own_token: bool) -> Owners {
        Owners {
            key: OnceCell::new(),
            own_token,
        }
    }

    /// Whether `/tamp/mcp` takes its credential from `x-api-key` only.
    pub fn own_token(&self) -> bool {
        self.own_token
    }

    /// The owner of the pages a request with `headers` writes: the hash of its `x-api-key`,
    /// else of its `Authorization: Bearer` value (the provider's key as the agent sends it);
    /// `None` without either, or when the store cannot give its key (then logged: its pages
    /// are written, but no `/tamp/mcp` caller can read them).
    pub async fn of(&self, active: &ActiveChain, headers: &HeaderMap) -> Option<String> {
        let credential = credential(headers, false)?;
        let search = active.chain.search()?;
        let key = self
            .key
            .get_or_try_init(|| search.owner_key())
            .await
            .inspect_err(|e| tracing::warn!("pages are written without an owner: {e}"))
            .ok()?;
        Some(owner_of_credential(key, credential))
    }
}

/// Records `owner` as the owner of the pages `report` lists (written while compacting
/// `thread`). A failure is logged: the compaction stands, its pages are kept.
pub async fn record(active: &ActiveChain, owner: &str, report: &ChainReport, thread: Option<&str>) {
    let pages: Vec<String> = report
        .stages
        .iter()
        .flat_map(|s| s.pages.iter().cloned())
        .collect();
    let Some(search) = active.chain.search() else {
        return;
    };
    if pages.is_empty() {
        return;
    }
    if let Err(e) = search.record_owner(owner, &pages, thread).await {
        tracing::warn!(
            "the owner of {} page(s) is not recorded (they cannot be recalled through \
             /tamp/mcp): {e}",
            pages.len()
        );
    }
}

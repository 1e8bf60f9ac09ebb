//! Checkpoints, tracked writes, rollback and retention through the [`Store`] handle.

use cairn_codec::CheckpointId;
use cairn_snapshot::{
    CheckpointInfo, CheckpointRequest, RetentionPolicy, RetentionReport, RollbackReport,
    RollbackRequest,
};

use crate::error::Result;
use crate::Store;

impl Store {
    /// Tells cairn these workspace-relative paths are about to be written,
    /// so the next checkpoint captures them (even if ignored, even if they
    /// do not exist yet).
    pub fn track(&self, paths: &[&str]) -> Result<()> {
        self.writer("track paths")?;
        Ok(self.workspace()?.track(paths)?)
    }

    /// Checkpoints the workspace: blobs made durable, then a
    /// `checkpoint.create` record.
    pub fn checkpoint(&self, req: CheckpointRequest) -> Result<CheckpointInfo> {
        let log = self.writer("checkpoint")?;
        Ok(cairn_snapshot::create_checkpoint(
            &**log,
            &*self.blobs,
            self.workspace()?,
            req,
        )?)
    }

    /// Every checkpoint (of one session, if given), oldest first, discarded ones included and marked.
    pub fn checkpoints(&self, session: Option<&str>) -> Result<Vec<CheckpointInfo>> {
        let log = self.writer("list checkpoints")?;
        Ok(cairn_snapshot::list_checkpoints(
            &**log,
            self.workspace()?,
            session,
        )?)
    }

    /// One checkpoint by id; an unknown id is an error that says how to list them.
    pub fn find_checkpoint(&self, id: CheckpointId) -> Result<CheckpointInfo> {
        let log = self.writer("find a checkpoint")?;
        Ok(cairn_snapshot::find_checkpoint(
            &**log,
            self.workspace()?,
            id,
        )?)
    }

    /// Rolls the workspace back (or forward: redo) to a checkpoint. The
    /// current state is checkpointed first, so the rollback can be undone.
    pub fn rollback(&self, req: RollbackRequest) -> Result<RollbackReport> {
        let log = self.writer("roll back")?;
        Ok(cairn_snapshot::rollback(
            &**log,
            &*self.blobs,
            self.workspace()?,
            req,
        )?)
    }

    /// Applies a retention policy (recording each eviction as a
    /// `checkpoint.discard`), then collects blobs no longer referenced.
    pub fn gc(&self, policy: &RetentionPolicy) -> Result<RetentionReport> {
        let log = self.writer("collect garbage")?;
        Ok(cairn_snapshot::apply_retention(
            &**log,
            &*self.blobs,
            self.workspace()?,
            policy,
        )?)
    }
}

//! An executor that records requests instead of running them, for the bash
//! tool's, the hooks' and the agent loop's tests.

use std::sync::{Arc, Mutex};

use dsh_env_harness::{BackgroundHandle, ExecError, ExecOutput, ShellExecRequest, ShellExecutor};

/// Records every request (and whether it was a background one); clones
/// share the record.
#[derive(Clone, Default)]
pub struct Recorder {
    requests: Arc<Mutex<Vec<(ShellExecRequest, bool)>>>,
}

impl Recorder {
    /// The requests so far, oldest first, leaving the record empty.
    pub fn taken(&self) -> Vec<(ShellExecRequest, bool)> {
        std::mem::take(&mut self.requests.lock().unwrap())
    }
}

/// What every recorded request "returns": exit 0, no output.
pub fn ok() -> ExecOutput {
    ExecOutput {
        exit_code: Some(0),
        stdout: Vec::new(),
        stderr: Vec::new(),
        truncated: false,
        timed_out: false,
    }
}

impl ShellExecutor for Recorder {
    async fn run(&self, request: ShellExecRequest) -> Result<ExecOutput, ExecError> {
        self.requests.lock().unwrap().push((request, false));
        Ok(ok())
    }

    fn spawn_background(&self, request: ShellExecRequest) -> Result<BackgroundHandle, ExecError> {
        self.requests.lock().unwrap().push((request, true));
        Ok(BackgroundHandle::new(
            None,
            tokio::spawn(async { Ok(ok()) }),
        ))
    }
}

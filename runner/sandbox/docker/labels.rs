//! The Docker backend's own container labels (the agent, its role, its pod). The run's ownership
//! labels and the owner identity are the run's records: [`crate::record::owner`].

pub use crate::record::owner::{
    Liveness, Owner, LABEL_OWNER_BOOT, LABEL_OWNER_HOST, LABEL_OWNER_PID, LABEL_OWNER_START,
    LABEL_RUN, LABEL_WORKSPACE,
};

/// Label: the agent instance name (`pod` for the pod's infrastructure container).
pub const LABEL_AGENT: &str = "flowerbox.agent";
/// Label: the agent's role (`pod` for the infrastructure container).
pub const LABEL_ROLE: &str = "flowerbox.role";
/// Label: the pod container's name (agent containers only).
pub const LABEL_POD: &str = "flowerbox.pod";

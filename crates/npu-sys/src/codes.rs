//! Every return code the header defines, with its symbolic name and a one-line explanation
//! (from the reference's error-code tables), shared by npu-core's errors and npu-sim's
//! messages.

use crate::aclError;

/// One documented ACL return code.
///
/// ```
/// let info = npu_sys::code_info(107003).unwrap();
/// assert_eq!(info.name, "ACL_ERROR_RT_STREAM_CONTEXT");
/// assert_eq!(info.code, npu_sys::ACL_ERROR_RT_STREAM_CONTEXT);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct AclCodeInfo {
    /// The value, e.g. 107003.
    pub code: aclError,
    /// The symbolic name, e.g. `ACL_ERROR_RT_STREAM_CONTEXT`.
    pub name: &'static str,
    /// What the code means, in a few words.
    pub description: &'static str,
}

/// The name and explanation of a documented code; `None` for any other value.
///
/// ```
/// assert_eq!(npu_sys::code_info(207001).unwrap().description, "device out of memory");
/// assert_eq!(npu_sys::code_info(42), None);
/// ```
pub fn code_info(code: aclError) -> Option<&'static AclCodeInfo> {
    CODES
        .binary_search_by_key(&code, |info| info.code)
        .ok()
        .map(|index| &CODES[index])
}

/// Builds the table from the bindgen constants, so a misspelt name does not compile.
macro_rules! codes {
    ($($name:ident => $description:literal,)*) => {
        /// Every documented code, sorted by value (checked by a test).
        static CODES: &[AclCodeInfo] = &[$(AclCodeInfo {
            code: crate::$name,
            name: stringify!($name),
            description: $description,
        },)*];
    };
}

codes! {
    ACL_SUCCESS => "success",
    ACL_ERROR_INVALID_PARAM => "invalid parameter (NULL pointer, zero size or bad enum value)",
    ACL_ERROR_UNINITIALIZE => "AscendCL is not initialised",
    ACL_ERROR_REPEAT_INITIALIZE => "AscendCL is already initialised",
    ACL_ERROR_INVALID_FILE => "invalid file",
    ACL_ERROR_WRITE_FILE => "failed to write a file",
    ACL_ERROR_INVALID_FILE_SIZE => "invalid file size",
    ACL_ERROR_PARSE_FILE => "failed to parse a file",
    ACL_ERROR_FILE_MISSING_ATTR => "file is missing an attribute",
    ACL_ERROR_FILE_ATTR_INVALID => "file has an invalid attribute",
    ACL_ERROR_INVALID_DUMP_CONFIG => "invalid dump configuration",
    ACL_ERROR_INVALID_PROFILING_CONFIG => "invalid profiling configuration",
    ACL_ERROR_INVALID_MODEL_ID => "invalid model id",
    ACL_ERROR_DESERIALIZE_MODEL => "failed to deserialise the model",
    ACL_ERROR_PARSE_MODEL => "failed to parse the model",
    ACL_ERROR_READ_MODEL_FAILURE => "failed to read the model",
    ACL_ERROR_MODEL_SIZE_INVALID => "invalid model size",
    ACL_ERROR_MODEL_MISSING_ATTR => "model is missing an attribute",
    ACL_ERROR_MODEL_INPUT_NOT_MATCH => "model input does not match",
    ACL_ERROR_MODEL_OUTPUT_NOT_MATCH => "model output does not match",
    ACL_ERROR_MODEL_NOT_DYNAMIC => "model is not dynamic",
    ACL_ERROR_OP_TYPE_NOT_MATCH => "operator type does not match",
    ACL_ERROR_OP_INPUT_NOT_MATCH => "operator input does not match",
    ACL_ERROR_OP_OUTPUT_NOT_MATCH => "operator output does not match",
    ACL_ERROR_OP_ATTR_NOT_MATCH => "operator attribute does not match",
    ACL_ERROR_OP_NOT_FOUND => "operator not found",
    ACL_ERROR_OP_LOAD_FAILED => "failed to load the operator",
    ACL_ERROR_UNSUPPORTED_DATA_TYPE => "unsupported data type",
    ACL_ERROR_FORMAT_NOT_MATCH => "format does not match",
    ACL_ERROR_BIN_SELECTOR_NOT_REGISTERED => "binary selector not registered",
    ACL_ERROR_KERNEL_NOT_FOUND => "kernel not found",
    ACL_ERROR_BIN_SELECTOR_ALREADY_REGISTERED => "binary selector already registered",
    ACL_ERROR_KERNEL_ALREADY_REGISTERED => "kernel already registered",
    ACL_ERROR_INVALID_QUEUE_ID => "invalid queue id",
    ACL_ERROR_REPEAT_SUBSCRIBE => "already subscribed",
    ACL_ERROR_STREAM_NOT_SUBSCRIBE => "stream is not subscribed",
    ACL_ERROR_THREAD_NOT_SUBSCRIBE => "thread is not subscribed",
    ACL_ERROR_WAIT_CALLBACK_TIMEOUT => "timed out waiting for a callback",
    ACL_ERROR_REPEAT_FINALIZE => "AscendCL is already finalised",
    ACL_ERROR_NOT_STATIC_AIPP => "not a static AIPP configuration",
    ACL_ERROR_COMPILING_STUB_MODE => "the runtime is a compile-only stub",
    ACL_ERROR_GROUP_NOT_SET => "group is not set",
    ACL_ERROR_GROUP_NOT_CREATE => "group is not created",
    ACL_ERROR_PROF_ALREADY_RUN => "profiling is already running",
    ACL_ERROR_PROF_NOT_RUN => "profiling is not running",
    ACL_ERROR_DUMP_ALREADY_RUN => "dump is already running",
    ACL_ERROR_DUMP_NOT_RUN => "dump is not running",
    ACL_ERROR_RT_PARAM_INVALID => "invalid parameter (out of range or inconsistent)",
    ACL_ERROR_RT_INVALID_DEVICEID => "invalid device id",
    ACL_ERROR_RT_CONTEXT_NULL => "no current context on this thread",
    ACL_ERROR_RT_STREAM_CONTEXT => "stream belongs to another context",
    ACL_ERROR_RT_MODEL_CONTEXT => "model belongs to another context",
    ACL_ERROR_RT_STREAM_MODEL => "stream is not bound to the model",
    ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID => "event timestamp is invalid",
    ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL => "event timestamps are reversed",
    ACL_ERROR_RT_ADDR_UNALIGNED => "address is not aligned",
    ACL_ERROR_RT_FILE_OPEN => "failed to open a file",
    ACL_ERROR_RT_FILE_WRITE => "failed to write a file",
    ACL_ERROR_RT_STREAM_SUBSCRIBE => "stream is already subscribed",
    ACL_ERROR_RT_THREAD_SUBSCRIBE => "thread is not subscribed (or serves another device)",
    ACL_ERROR_RT_GROUP_NOT_SET => "group is not set",
    ACL_ERROR_RT_GROUP_NOT_CREATE => "group is not created",
    ACL_ERROR_RT_STREAM_NO_CB_REG => "no callback thread is subscribed to the stream",
    ACL_ERROR_RT_INVALID_MEMORY_TYPE => "invalid memory type",
    ACL_ERROR_RT_INVALID_HANDLE => "invalid or destroyed handle",
    ACL_ERROR_RT_INVALID_MALLOC_TYPE => "invalid allocation type",
    ACL_ERROR_RT_WAIT_TIMEOUT => "wait timed out",
    ACL_ERROR_RT_TASK_TIMEOUT => "task timed out",
    ACL_ERROR_RT_SYSPARAMOPT_NOT_SET => "system parameter option is not set",
    ACL_ERROR_RT_DEVICE_TASK_ABORT => "device tasks were aborted",
    ACL_ERROR_RT_STREAM_ABORT => "stream was aborted",
    ACL_ERROR_RT_CAPTURE_DEPENDENCY => "capture dependency error",
    ACL_ERROR_RT_STREAM_UNJOINED => "captured stream was not joined",
    ACL_ERROR_RT_MODEL_CAPTURED => "model is being captured",
    ACL_ERROR_RT_STREAM_CAPTURED => "stream is being captured",
    ACL_ERROR_RT_EVENT_CAPTURED => "event is being captured",
    ACL_ERROR_RT_STREAM_NOT_CAPTURED => "stream is not being captured",
    ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT => "capture mode not supported",
    ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT => "implicit stream capture",
    ACL_ERROR_STREAM_CAPTURE_CONFLICT => "stream capture conflict",
    ACL_ERROR_STREAM_TASK_GROUP_STATUS => "invalid stream task group status",
    ACL_ERROR_STREAM_TASK_GROUP_INTR => "stream task group interrupted",
    ACL_ERROR_RT_TASK_ABORT_STOP => "task aborted by a stop",
    ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED => "unmatched stream capture",
    ACL_ERROR_RT_MODEL_RUNNING => "model is running",
    ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD => "stream capture ended on the wrong thread",
    ACL_ERROR_RT_INSUFFICIENT_INPUT_ARRAY => "input array is too small",
    ACL_ERROR_RT_MODEL_UPDATE_FAILED => "model update failed",
    ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC => "capture mode blocks asynchronous calls",
    ACL_ERROR_RT_SYMBOL_NOT_FOUND => "symbol not found",
    ACL_ERROR_RT_INVALID_SYMBOL => "invalid symbol",
    ACL_ERROR_RT_INVALID_DEVICE_FUNCTION => "invalid device function",
    ACL_ERROR_RT_SUB_ACLGRAPH_IS_CAPTURING => "a sub-graph is capturing",
    ACL_ERROR_PROF_REPEAT_SUBSCRIBE => "profiling is already subscribed",
    ACL_ERROR_PROF_API_CONFLICT => "conflicting profiling APIs",
    ACL_ERROR_INVALID_MAX_OPQUEUE_NUM_CONFIG => "invalid operator-queue limit",
    ACL_ERROR_INVALID_OPP_PATH => "invalid operator package path",
    ACL_ERROR_OP_UNSUPPORTED_DYNAMIC => "operator does not support dynamic shapes",
    ACL_ERROR_RELATIVE_RESOURCE_NOT_CLEARED => "related resources are not released",
    ACL_ERROR_UNSUPPORTED_JPEG => "unsupported JPEG",
    ACL_ERROR_INVALID_BUNDLE_MODEL_ID => "invalid bundle model id",
    ACL_ERROR_BAD_ALLOC => "memory allocation failed",
    ACL_ERROR_API_NOT_SUPPORT => "API not supported",
    ACL_ERROR_INVALID_DEVICE => "invalid device",
    ACL_ERROR_MEMORY_ADDRESS_UNALIGNED => "memory address is not aligned",
    ACL_ERROR_RESOURCE_NOT_MATCH => "resources do not match",
    ACL_ERROR_INVALID_RESOURCE_HANDLE => "invalid resource handle",
    ACL_ERROR_FEATURE_UNSUPPORTED => "feature not supported",
    ACL_ERROR_PROF_MODULES_UNSUPPORTED => "profiling modules not supported",
    ACL_ERROR_RT_FEATURE_NOT_SUPPORT => "feature not supported by this runtime or device",
    ACL_ERROR_RT_MEMORY_ALLOCATION => "device out of memory",
    ACL_ERROR_RT_MEMORY_FREE => "failed to free memory",
    ACL_ERROR_RT_AICORE_OVER_FLOW => "AI Core arithmetic overflow",
    ACL_ERROR_RT_NO_DEVICE => "no device available",
    ACL_ERROR_RT_RESOURCE_ALLOC_FAIL => "resource allocation failed",
    ACL_ERROR_RT_NO_PERMISSION => "permission denied",
    ACL_ERROR_RT_NO_EVENT_RESOURCE => "no event resources left",
    ACL_ERROR_RT_NO_STREAM_RESOURCE => "no stream resources left",
    ACL_ERROR_RT_NO_NOTIFY_RESOURCE => "no notify resources left",
    ACL_ERROR_RT_NO_MODEL_RESOURCE => "no model resources left",
    ACL_ERROR_RT_NO_CDQ_RESOURCE => "no CDQ resources left",
    ACL_ERROR_RT_OVER_LIMIT => "over a resource limit",
    ACL_ERROR_RT_QUEUE_EMPTY => "queue is empty",
    ACL_ERROR_RT_QUEUE_FULL => "queue is full",
    ACL_ERROR_RT_REPEATED_INIT => "already initialised",
    ACL_ERROR_RT_AIVEC_OVER_FLOW => "AI Vector arithmetic overflow",
    ACL_ERROR_RT_OVER_FLOW => "arithmetic overflow",
    ACL_ERROR_RT_DEVICE_OOM => "device out of memory",
    ACL_ERROR_RT_FEATURE_NOT_SUPPORT_UPDATE_OP => "operator update not supported",
    ACL_ERROR_RT_TIMEOUT => "timed out",
    ACL_ERROR_RT_LINK_TYPE_NOT_SUPPORTED => "link type not supported",
    ACL_ERROR_STORAGE_OVER_LIMIT => "storage over its limit",
    ACL_ERROR_INTERNAL_ERROR => "internal AscendCL error",
    ACL_ERROR_FAILURE => "AscendCL failure",
    ACL_ERROR_GE_FAILURE => "graph engine failure",
    ACL_ERROR_RT_FAILURE => "runtime failure",
    ACL_ERROR_DRV_FAILURE => "driver failure",
    ACL_ERROR_PROFILING_FAILURE => "profiling failure",
    ACL_ERROR_RT_INTERNAL_ERROR => "internal runtime error",
    ACL_ERROR_RT_TS_ERROR => "task scheduler error",
    ACL_ERROR_RT_STREAM_TASK_FULL => "stream task queue is full",
    ACL_ERROR_RT_STREAM_TASK_EMPTY => "stream task queue is empty",
    ACL_ERROR_RT_STREAM_NOT_COMPLETE => "stream has not completed",
    ACL_ERROR_RT_END_OF_SEQUENCE => "end of sequence",
    ACL_ERROR_RT_EVENT_NOT_COMPLETE => "event has not completed",
    ACL_ERROR_RT_CONTEXT_RELEASE_ERROR => "context release failed (device not set or already reset)",
    ACL_ERROR_RT_SOC_VERSION => "SoC version error",
    ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT => "task type not supported",
    ACL_ERROR_RT_LOST_HEARTBEAT => "device lost (heartbeat lost)",
    ACL_ERROR_RT_MODEL_EXECUTE => "model execution failed",
    ACL_ERROR_RT_REPORT_TIMEOUT => "no callback report arrived before the timeout",
    ACL_ERROR_RT_SYS_DMA => "DMA error",
    ACL_ERROR_RT_AICORE_TIMEOUT => "AI Core task timed out",
    ACL_ERROR_RT_AICORE_EXCEPTION => "AI Core exception (kernel fault)",
    ACL_ERROR_RT_AICORE_TRAP_EXCEPTION => "AI Core trap exception",
    ACL_ERROR_RT_AICPU_TIMEOUT => "AI CPU task timed out",
    ACL_ERROR_RT_AICPU_EXCEPTION => "AI CPU exception",
    ACL_ERROR_RT_AICPU_DATADUMP_RSP_ERR => "AI CPU data-dump response error",
    ACL_ERROR_RT_AICPU_MODEL_RSP_ERR => "AI CPU model response error",
    ACL_ERROR_RT_PROFILING_ERROR => "profiling error",
    ACL_ERROR_RT_IPC_ERROR => "IPC error",
    ACL_ERROR_RT_MODEL_ABORT_NORMAL => "model aborted",
    ACL_ERROR_RT_KERNEL_UNREGISTERING => "kernel is being unregistered",
    ACL_ERROR_RT_RINGBUFFER_NOT_INIT => "ring buffer not initialised",
    ACL_ERROR_RT_RINGBUFFER_NO_DATA => "ring buffer has no data",
    ACL_ERROR_RT_KERNEL_LOOKUP => "kernel lookup failed",
    ACL_ERROR_RT_KERNEL_DUPLICATE => "kernel registered twice",
    ACL_ERROR_RT_DEBUG_REGISTER_FAIL => "debug registration failed",
    ACL_ERROR_RT_DEBUG_UNREGISTER_FAIL => "debug unregistration failed",
    ACL_ERROR_RT_LABEL_CONTEXT => "label belongs to another context",
    ACL_ERROR_RT_PROGRAM_USE_OUT => "program resources exhausted",
    ACL_ERROR_RT_DEV_SETUP_ERROR => "device setup failed",
    ACL_ERROR_RT_VECTOR_CORE_TIMEOUT => "Vector Core task timed out",
    ACL_ERROR_RT_VECTOR_CORE_EXCEPTION => "Vector Core exception (kernel fault)",
    ACL_ERROR_RT_VECTOR_CORE_TRAP_EXCEPTION => "Vector Core trap exception",
    ACL_ERROR_RT_CDQ_BATCH_ABNORMAL => "CDQ batch abnormal",
    ACL_ERROR_RT_DIE_MODE_CHANGE_ERROR => "die mode change failed",
    ACL_ERROR_RT_DIE_SET_ERROR => "die setting failed",
    ACL_ERROR_RT_INVALID_DIEID => "invalid die id",
    ACL_ERROR_RT_DIE_MODE_NOT_SET => "die mode not set",
    ACL_ERROR_RT_AICORE_TRAP_READ_OVERFLOW => "AI Core read out of bounds",
    ACL_ERROR_RT_AICORE_TRAP_WRITE_OVERFLOW => "AI Core write out of bounds",
    ACL_ERROR_RT_VECTOR_CORE_TRAP_READ_OVERFLOW => "Vector Core read out of bounds",
    ACL_ERROR_RT_VECTOR_CORE_TRAP_WRITE_OVERFLOW => "Vector Core write out of bounds",
    ACL_ERROR_RT_STREAM_SYNC_TIMEOUT => "stream synchronisation timed out",
    ACL_ERROR_RT_EVENT_SYNC_TIMEOUT => "event synchronisation timed out",
    ACL_ERROR_RT_FFTS_PLUS_TIMEOUT => "FFTS+ task timed out",
    ACL_ERROR_RT_FFTS_PLUS_EXCEPTION => "FFTS+ exception",
    ACL_ERROR_RT_FFTS_PLUS_TRAP_EXCEPTION => "FFTS+ trap exception",
    ACL_ERROR_RT_SEND_MSG => "failed to send a message to the device",
    ACL_ERROR_RT_COPY_DATA => "data copy failed",
    ACL_ERROR_RT_DEVICE_MEM_ERROR => "device memory error",
    ACL_ERROR_RT_HBM_MULTI_BIT_ECC_ERROR => "HBM multi-bit ECC error",
    ACL_ERROR_RT_SUSPECT_DEVICE_MEM_ERROR => "suspected device memory error",
    ACL_ERROR_RT_LINK_ERROR => "link error",
    ACL_ERROR_RT_SUSPECT_REMOTE_ERROR => "suspected remote error",
    ACL_ERROR_RT_DRV_INTERNAL_ERROR => "internal driver error",
    ACL_ERROR_RT_AICPU_INTERNAL_ERROR => "internal AI CPU error",
    ACL_ERROR_RT_SOCKET_CLOSE => "socket closed",
    ACL_ERROR_RT_AICPU_INFO_LOAD_RSP_ERR => "AI CPU info-load response error",
    ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED => "stream capture invalidated",
    ACL_ERROR_RT_COMM_OP_RETRY_FAIL => "communication operator retry failed",
    ACL_ERROR_SNAPSHOT_LOCK_TIMEOUT => "snapshot lock timed out",
    ACL_ERROR_SNAPSHOT_LOCK_FAILED => "snapshot lock failed",
    ACL_ERROR_SNAPSHOT_UNLOCK_FAILED => "snapshot unlock failed",
    ACL_ERROR_SNAPSHOT_BACKUP_FAILED => "snapshot backup failed",
    ACL_ERROR_SNAPSHOT_RESTORE_FAILED => "snapshot restore failed",
    ACL_ERROR_HOST_MEMORY_ALREADY_REGISTERED => "host memory range is already registered",
    ACL_ERROR_HOST_MEMORY_NOT_REGISTERED => "host memory is not registered",
    ACL_ERROR_SNAPSHOT_CALLBACK_FAILED => "snapshot callback failed",
    ACL_ERROR_SNAPSHOT_REGISTER_CALLBACK_FAILED => "snapshot callback registration failed",
    ACL_ERROR_RT_L3_PORT_ERROR => "L3 port error",
    ACL_ERROR_RT_CCU_TIMEOUT => "CCU timed out",
    ACL_ERROR_RT_CCU_EXCEPTION => "CCU exception",
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_and_unique() {
        for pair in CODES.windows(2) {
            assert!(
                pair[0].code < pair[1].code,
                "{} and {} out of order",
                pair[0].name,
                pair[1].name
            );
        }
    }

    #[test]
    fn every_bound_error_constant_is_named() {
        // Every distinct code the header defines: 213 errors plus success (ACL_ERROR_NONE and
        // ACL_RT_SUCCESS are aliases of ACL_SUCCESS).
        assert_eq!(CODES.len(), 214);
        for info in CODES {
            assert_eq!(
                code_info(info.code).map(|found| found.name),
                Some(info.name)
            );
            assert!(!info.description.is_empty());
        }
    }
}

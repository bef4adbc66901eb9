/*
 * sbx_proto.h - constants shared by sbxd and libsbx: framing limits,
 * JSON-RPC error codes, method and notification names.
 *
 * This header is the single source of truth for the wire protocol
 * described in proto/PROTOCOL.md. It holds no code.
 */
#ifndef SBX_PROTO_H
#define SBX_PROTO_H

#define SBX_PROTO_VERSION "1.0"

/* Framing: one JSON-RPC 2.0 object (or batch array) per '\n'-terminated line. */
#define SBX_DEFAULT_SOCKET "/run/sbxd/sbxd.sock"
#define SBX_DEFAULT_MAX_MESSAGE (16u * 1024 * 1024)
#define SBX_MAX_JSON_DEPTH 64

/* Standard JSON-RPC 2.0 errors. */
#define SBX_E_PARSE -32700
#define SBX_E_INVALID_REQUEST -32600
#define SBX_E_METHOD -32601
#define SBX_E_PARAMS -32602
#define SBX_E_INTERNAL -32603

/* Application errors: stable, documented in PROTOCOL.md. */
#define SBX_E_NOT_FOUND -32000   /* sandbox not found (or not yours) */
#define SBX_E_STATE -32001       /* sandbox in the wrong state */
#define SBX_E_UNAVAILABLE -32002 /* provider unavailable */
#define SBX_E_PERMISSION -32003  /* permission denied */
#define SBX_E_NO_PROCESS -32004  /* process not found */
#define SBX_E_LIMIT -32005       /* a configured limit was hit */
#define SBX_E_PROVIDER -32006    /* provider error, data.message is the provider's */
#define SBX_E_TOO_LARGE -32007   /* message over max_message_bytes; connection closes */
#define SBX_E_SHUTDOWN -32008    /* daemon is shutting down */
#define SBX_E_TOOL -32009        /* tool.call failed on the client side */
#define SBX_E_FS -32010          /* a file operation failed: data {errno, path} */
#define SBX_E_UNSUPPORTED -32011 /* not supported here: {provider, feature} */

/* Output streams, one numbering for libsbx (SBX_STDOUT/SBX_STDERR) and the
 * daemon's provider interface (process_output). The wire names them
 * "stdout"/"stderr"; these are the file descriptors they stand for. */
#define SBX_STREAM_STDOUT 1
#define SBX_STREAM_STDERR 2

/* Exit codes the daemon reports for processes it ended itself. */
#define SBX_EXIT_TIMEOUT 124
#define SBX_EXIT_KILLED 137 /* 128 + SIGKILL */

/* Methods (client -> daemon). */
#define SBX_M_PING "daemon.ping"
#define SBX_M_INFO "daemon.info"
#define SBX_M_CREATE "sandbox.create"
#define SBX_M_GET "sandbox.get"
#define SBX_M_LIST "sandbox.list"
#define SBX_M_START "sandbox.start"
#define SBX_M_STOP "sandbox.stop"
#define SBX_M_DESTROY "sandbox.destroy"
#define SBX_M_SNAPSHOT "sandbox.snapshot"
#define SBX_M_SNAPSHOT_LIST "snapshot.list"
#define SBX_M_SNAPSHOT_DELETE "snapshot.delete"
#define SBX_M_CLONE "sandbox.clone"
#define SBX_M_SET_ENV "sandbox.set_env"
#define SBX_M_INSTRUCTIONS "sandbox.instructions"
#define SBX_M_EXEC "process.exec"
#define SBX_M_SPAWN "process.spawn"
#define SBX_M_WRITE "process.write"
#define SBX_M_CLOSE_STDIN "process.close_stdin"
#define SBX_M_KILL "process.kill"
#define SBX_M_WAIT "process.wait"
#define SBX_M_PLIST "process.list"
#define SBX_M_ATTACH "process.attach"
#define SBX_M_DETACH "process.detach"
/* files (PROTOCOL.md "Files") */
#define SBX_M_FS_READ "fs.read"
#define SBX_M_FS_WRITE "fs.write"
#define SBX_M_FS_LIST "fs.list"
#define SBX_M_FS_STAT "fs.stat"
#define SBX_M_FS_MKDIR "fs.mkdir"
#define SBX_M_FS_REMOVE "fs.remove"
#define SBX_M_FS_RENAME "fs.rename"
#define SBX_M_FS_WATCH "fs.watch"
#define SBX_M_FS_UNWATCH "fs.unwatch"
#define SBX_M_FS_STREAM "fs.stream" /* a raw transfer's connection (fs_stream.c) */
/* issue 18: terminals, ports, stats */
#define SBX_M_RESIZE "process.resize"
#define SBX_M_STATS "sandbox.stats"
#define SBX_N_STATS "sandbox.stats"
#define SBX_M_EXPOSE "sandbox.expose"
#define SBX_M_UNEXPOSE "sandbox.unexpose"
/* issue 17 (ts17): host directories bound into a running sandbox */
#define SBX_M_MOUNT "sandbox.mount"
#define SBX_M_UNMOUNT "sandbox.unmount"
#define SBX_N_EGRESS "sandbox.egress"

/* Notifications (daemon -> client). */
#define SBX_N_OUTPUT "process.output"
#define SBX_N_EXIT "process.exit"
#define SBX_N_STARTED "process.started"
#define SBX_N_PROGRESS "sandbox.progress"
#define SBX_N_STATUS "sandbox.status"
#define SBX_N_FS_EVENT "fs.event"

/* Requests (daemon -> client). */
#define SBX_R_TOOL_CALL "tool.call"

#endif

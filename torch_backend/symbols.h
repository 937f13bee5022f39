/* symbols.h: the torch functions the backend defines, as an X-macro:
** DAT_SYM(index, name, mangled). Every member of DistAutogradContainer
** (both constructor symbols share one entry). DistEngine::getDebugInfo stays
** libtorch's: it reads the container through its public members (through
** the PLT), so torch.distributed.autograd._get_debug_info() shows torch's two
** figures with torch's meaning; distautograd's own are
** distautograd.torch.debug_info(). Included by the shim (C and assembly) and
** the implementation. */
#define DAT_PRIVATE_FIRST 18
#define DAT_NSYMS 23
#define DAT_SYMBOLS(X)                                                                                              \
	X(0, init, _ZN5torch11distributed8autograd21DistAutogradContainer4initEl)                                       \
	X(1, getInstance, _ZN5torch11distributed8autograd21DistAutogradContainer11getInstanceEv)                        \
	X(2, newContext, _ZN5torch11distributed8autograd21DistAutogradContainer10newContextEv)                          \
	X(3, releaseContext, _ZN5torch11distributed8autograd21DistAutogradContainer14releaseContextEl)                  \
	X(4, releaseContextIfPresent, _ZN5torch11distributed8autograd21DistAutogradContainer23releaseContextIfPresentEl) \
	X(5, isValidContext, _ZN5torch11distributed8autograd21DistAutogradContainer14isValidContextEl)                  \
	X(6, retrieveContext, _ZN5torch11distributed8autograd21DistAutogradContainer15retrieveContextEl)                \
	X(7, currentContext, _ZN5torch11distributed8autograd21DistAutogradContainer14currentContextEv)                  \
	X(8, hasValidContext, _ZNK5torch11distributed8autograd21DistAutogradContainer15hasValidContextEv)              \
	X(9, newAutogradMessageId, _ZN5torch11distributed8autograd21DistAutogradContainer20newAutogradMessageIdEv)      \
	X(10, getOrCreateContext, _ZN5torch11distributed8autograd21DistAutogradContainer18getOrCreateContextEl)         \
	X(11, getMaxId, _ZN5torch11distributed8autograd21DistAutogradContainer8getMaxIdEv)                              \
	X(12, getWorkerId, _ZNK5torch11distributed8autograd21DistAutogradContainer11getWorkerIdEv)                      \
	X(13, setCurrentContextId, _ZN5torch11distributed8autograd21DistAutogradContainer19setCurrentContextIdEl)       \
	X(14, forceCurrentContextId, _ZN5torch11distributed8autograd21DistAutogradContainer21forceCurrentContextIdEl)   \
	X(15, clearCurrentContext, _ZN5torch11distributed8autograd21DistAutogradContainer19clearCurrentContextEv)       \
	X(16, numAutogradContexts, _ZNK5torch11distributed8autograd21DistAutogradContainer19numAutogradContextsEv)      \
	X(17, currentContextId, _ZN5torch11distributed8autograd21DistAutogradContainer16currentContextIdEv)             \
	X(18, getInstanceInternal, _ZN5torch11distributed8autograd21DistAutogradContainer19getInstanceInternalEv)       \
	X(19, computeNumShards, _ZN5torch11distributed8autograd21DistAutogradContainer16computeNumShardsEv)             \
	X(20, ctor, _ZN5torch11distributed8autograd21DistAutogradContainerC1Ej)                                         \
	X(21, sendReleaseContextRpc,                                                                                    \
	  _ZN5torch11distributed8autograd21DistAutogradContainer21sendReleaseContextRpcERKSt13unordered_setIsSt4hashIsESt8equal_toIsESaIsEEl) \
	X(22, eraseContextIdAndReset,                                                                                   \
	  _ZN5torch11distributed8autograd21DistAutogradContainer22eraseContextIdAndResetERNS2_13ContextsShardEl)

/* The second constructor symbol, an alias of entry 20 (ctor). */
#define DAT_CTOR2 _ZN5torch11distributed8autograd21DistAutogradContainerC2Ej

/* Entries 0..DAT_PRIVATE_FIRST-1 are the public members, which the backend
** serves. The private members (18..22) only ever run
** from libtorch's own member functions, which the backend calls once, in
** its run-time check (impl.cpp: probe, which has libtorch's container make
** and release a context): they stay libtorch's, but sendReleaseContextRpc,
** whose only caller then is that check (a fresh context, no known workers). */
#define DAT_IDX_SEND_RELEASE 21

/* The torch releases served, by the version in libtorch_cpu's soname
** (libtorch_cpu.so.1.13, libtorch_cpu.so.2.6): each has its
** implementation, libdistautograd_torch_impl_<version>.so, built against
** that torch's own headers (the Makefile's TORCH_VERSIONS builds them;
** distautograd._launch.SERVED_TORCH lists them for the launcher). All of
** them export every symbol above. */
#define DAT_TORCH_VERSIONS(X) X("1.13") X("2.6")
#define DAT_TORCH_SONAME_PREFIX "libtorch_cpu.so."

/* The variable in which the launcher names the abstract socket a served
** process tells (shim.c: notify_served; distautograd._launch.NOTIFY_ENV,
** the same name: test_backend's TestServedLine ties the two). */
#define DAT_NOTIFY_ENV "DISTAUTOGRAD_TORCH_NOTIFY"

#ifndef __ASSEMBLER__
/* What the shim gives the implementation (impl.cpp): libtorch's own
** definitions, and where the implementation's entries go. */
typedef struct dat_start_args {
	int abi;                 /* DAT_ABI */
	void *const *real;       /* DAT_NSYMS entries: libtorch's definitions */
	void **serve;            /* DAT_NSYMS entries to fill: the backend's */
	char *why;               /* a reason to stay inert, if it fails */
	unsigned long why_cap;
	const char *simulate;    /* DISTAUTOGRAD_TORCH_SIMULATE_MISMATCH, or NULL */
	const char *torch;       /* the loaded torch's version, from its soname ("2.6") */
} dat_start_args;
#define DAT_ABI 2
#endif

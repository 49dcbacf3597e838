package gateway

// SetHookBeforeJoin holds every upgrade between its admission and its
// join while hook runs (nil: none), for the tests of package gateway_test.
func SetHookBeforeJoin(hook func(pod, participant string)) {
	if hook == nil {
		hookBeforeJoin.Store(nil)
		return
	}
	hookBeforeJoin.Store(&hook)
}

// SetHookPublishLine holds every publish before each envelope after its
// first while hook runs (nil: none), for the tests of package gateway_test.
func SetHookPublishLine(hook func(pod, participant string, line int)) {
	if hook == nil {
		hookPublishLine.Store(nil)
		return
	}
	hookPublishLine.Store(&hook)
}

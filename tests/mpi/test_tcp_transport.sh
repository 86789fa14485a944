#!/usr/bin/env bash
# The invariants over Open MPI's TCP transport on loopback (the path between hosts).
SUBDP_TEST_BTL=self,tcp bash "$(dirname "$0")/test_invariant5_holders_agree.sh" "$@"

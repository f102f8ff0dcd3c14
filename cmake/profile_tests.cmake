# The rdma suites again on each simnic device profile other than the default: the
# transport, RPC and PS tests over rdma://, and the engine, on a RoCE v2 NIC, on a dual-port one
# cabled on port 2 only, and on an InfiniBand HCA (src/simnic/device_profile.h). ctest -L profile runs only these.
# The PS suite leaves out its 64 MiB pushes and 1 GiB fetch (ps_large_transfers, 33 of its 43 s
# a profile): the transport suite's echoes up to 64 MiB already cross each profile's MTU. It runs
# its data-path, authentication and replication tests (fetch, push, views, secrets, forwarding,
# catch-up), not the failover-monitor and lease tests: those time leases and promotions over the
# same sockets, which nothing of a device's shape changes, and took 13 of its 19-20 s a profile
# (they run on the default shape in every pass).
foreach(profile roce roce2 ib)
  set(suites
    "engine|bx_engine_test|*"
    "transport|bx_transport_test|*/rdma:Rdma*"
    "rpc|bx_rpc_test|*/rdma:RpcProcess*"
    "ps_service|bx_ps_service_test|*PsServiceTest.*/rdma:*LeasedFailoverTest.ARestartedReplica*/rdma:*LeasedFailoverTest.AnUnreachableBackup*/rdma-*LargePushes*:*LargeFetch*:*FailoverMonitor*")
  foreach(suite IN LISTS suites)
    string(REPLACE "|" ";" parts "${suite}")
    list(GET parts 0 name)
    list(GET parts 1 target)
    list(GET parts 2 filter)
    add_test(NAME profile_${profile}.${name}
      COMMAND $<TARGET_FILE:${target}> --gtest_filter=${filter} --gtest_brief=1)
    set_tests_properties(profile_${profile}.${name} PROPERTIES
      ENVIRONMENT "BX_SIM_PROFILE=${profile};BX_VERBS=sim"
      LABELS "profile;profile-${profile}"
      TIMEOUT 600 COST 10)
  endforeach()
endforeach()

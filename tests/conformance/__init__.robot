*** Settings ***
Documentation     Conformance of the gateway with the real peers: the stock JsonRpcRemote client, the
...               reference server (robot_jsonrpcremote_server) as worker and upstream, and Robot
...               Framework's own Remote library, against the real gateway binary (RJG_BIN_DIR).
...
...               Run by deploy/conformance.sh with `--skiponfailure gap`: a test tagged `gap` shows
...               a known gap of issue 23 (its second tag names which); it is reported as SKIP with
...               its failure message while the gap is open, and passes by itself once it is closed.
...               Every other test must pass.
...
...               Robot Framework shares one instance of a library between imports with the same
...               arguments, whatever their alias and suite, and the stock client cannot use an instance
...               again once a suite has ended its session (`_end_suite` fails with "Event loop is
...               closed", then every keyword with "Event loop is not initialized yet"; the same with
...               the reference server alone). So every import through the gateway adds a fragment to
...               the URI naming its suite (`${GATEWAY}#values`), which the client ignores; an import
...               a test needs for itself adds its name (`${GATEWAY}#lost-crashing`). A test that
...               exercises a gap has an import of its own: a gateway error, or a value the client
...               cannot read, ends the client's session for every later keyword of that import.
Library           libraries/ConformanceLab.py
Suite Setup       Start The Lab
Suite Teardown    Stop Lab

*** Keywords ***
Start The Lab
    # Some tests check DEBUG lines (a classic server's, a worker's, Remote's tracebacks).
    Set Log Level    DEBUG
    Start Lab

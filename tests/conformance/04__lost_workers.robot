*** Settings ***
Documentation     A worker that crashes or overruns keyword_timeout in the middle of a suite: that one
...               keyword fails, naming the library and what happened, and the suite goes on: other
...               libraries at once, the same import with a fresh instance (issue 23, item 3).
Library           JsonRpcRemote    ${GATEWAY}#lost-crashing    Fragile    AS    Crashing
Library           JsonRpcRemote    ${GATEWAY}#lost-timing-out    Fragile    AS    TimingOut
Library           JsonRpcRemote    ${GATEWAY}#lost-refusing    Fragile    AS    Refusing
Library           JsonRpcRemote    ${GATEWAY}#lost    Values    AS    Bystander
Library           Collections
Library           libraries/LogRecorder.py

*** Test Cases ***
A Crash Fails The Keyword Running
    ${calls} =    Crashing.Count Calls
    Should Be Equal    ${calls}    ${1}
    Run Keyword And Expect Error    *library*Fragile*died with signal 9*Crash*    Crashing.Crash

Other Libraries Go On After A Crash
    ${value} =    Bystander.Echo    still here
    Should Be Equal    ${value}    still here

The Next Keyword After A Crash Gets A Fresh Instance
    Start Recording Logs
    ${calls} =    Crashing.Count Calls
    ${logged} =    Stop Recording Logs
    Should Be Equal    ${calls}    ${1}    not a fresh instance
    Should Contain Match    ${logged}    WARN: *Fragile*    the lost state is not logged as a warning

A Keyword Over keyword_timeout Fails
    ${calls} =    TimingOut.Count Calls
    Should Be Equal    ${calls}    ${1}
    Run Keyword And Expect Error    *Sleep For*Fragile*    TimingOut.Sleep For    60

Other Libraries Go On After A Timeout
    ${value} =    Bystander.Echo    still here
    Should Be Equal    ${value}    still here

The Next Keyword After A Timeout Gets A Fresh Instance
    Start Recording Logs
    ${calls} =    TimingOut.Count Calls
    ${logged} =    Stop Recording Logs
    Should Be Equal    ${calls}    ${1}    not a fresh instance
    Should Contain Match    ${logged}    WARN: *Fragile*    the lost state is not logged as a warning

A Refused Argument Fails Only Its Keyword
    ${calls} =    Refusing.Count Calls
    ${system} =    Evaluate    os.system    modules=os
    Run Keyword And Expect Error    *value at args?0? was refused: class posix.system is not allowed*
    ...    Refusing.Describe    ${system}
    ${calls} =    Refusing.Count Calls
    Should Be Equal    ${calls}    ${2}    the instance did not survive a refused argument

*** Settings ***
Documentation     What a keyword logs reaches Robot's log with its level and HTML flag, before the
...               keyword's answer; a failing keyword fails with its message, type and traceback, and
...               the keywords after it run.
Library           JsonRpcRemote    ${GATEWAY}#logs    Values    AS    Values
Library           JsonRpcRemote    ${GATEWAY}#logs    Upstream    AS    Upstream
Library           JsonRpcRemote    ${GATEWAY}#logs    Native    AS    Native
Library           libraries/LogRecorder.py

*** Test Cases ***
Logs Arrive With Their Levels And HTML
    Start Recording Logs
    ${result} =    Values.Log At Each Level
    ${logged} =    Stop Recording Logs
    Should Be Equal    ${result}    logged
    # The reference server sends what its own Robot Framework logs at its default level, INFO.
    Should Contain In Order    ${logged}    INFO: an info message
    ...    INFO (html): <b>an html message</b>    WARN: a warning    ERROR: an error message

Logs Arrive At Every Level A Worker Sends
    Start Recording Logs
    Native.Log Messages    1    size=3    level=DEBUG
    Native.Log Messages    1    size=4    level=WARN
    Native.Log Messages    1    size=5    level=ERROR
    ${logged} =    Stop Recording Logs
    Should Contain In Order    ${logged}    DEBUG: 0:xxx    WARN: 0:xxxx    ERROR: 0:xxxxx

Logs Arrive From An Upstream
    Start Recording Logs
    Upstream.Log At Each Level
    ${logged} =    Stop Recording Logs
    Should Contain In Order    ${logged}    INFO: an info message    INFO (html): <b>an html message</b>
    ...    WARN: a warning    ERROR: an error message

A Failure Carries Its Message
    Run Keyword And Expect Error    Error executing keyword 'Fail With': RunKeywordError(message='ValueError: it broke', *
    ...    Values.Fail With    it broke    ValueError

A Generic Failure Carries Its Message Alone
    Run Keyword And Expect Error    Error executing keyword 'Fail With': RunKeywordError(message='it broke', *
    ...    Values.Fail With    it broke

The Keyword After A Failure Runs
    Run Keyword And Expect Error    *it broke*    Values.Fail With    it broke
    ${value} =    Values.Echo    after the failure
    Should Be Equal    ${value}    after the failure

A Failure Carries Its Type, Traceback And Mode
    Run Keyword And Expect Error
    ...    Error executing keyword 'Fail': RunKeywordError(message='native failure', type='LookupError', traceback='Traceback (most recent call last):\\n line 1', mode=<RunKeywordErrorMode.CONTINUABLE: 'CONTINUABLE'>)
    ...    Native.Fail    native failure    LookupError    Traceback (most recent call last):\n line 1    CONTINUABLE
    ${value} =    Native.Echo    after the failure
    Should Be Equal    ${value}    after the failure

A Failure Through An Upstream Carries Its Message
    Run Keyword And Expect Error    *message='ValueError: upstream broke'*    Upstream.Fail With    upstream broke    ValueError
    ${value} =    Upstream.Echo    after the failure
    Should Be Equal    ${value}    after the failure

*** Keywords ***
Should Contain In Order
    [Documentation]    Each expected message is in ${logged}, in this order (other messages may come between).
    [Arguments]    ${logged}    @{expected}
    ${position} =    Set Variable    ${0}
    FOR    ${message}    IN    @{expected}
        ${rest} =    Evaluate    $logged[$position:]
        Should Contain    ${rest}    ${message}    '${message}' was not logged after the messages before it: ${logged}
        ${position} =    Evaluate    $logged.index($message, $position) + 1
    END

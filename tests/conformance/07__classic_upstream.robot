*** Settings ***
Documentation     JsonRpcRemote through the gateway's classic upstream route (robot-classic-bridge) to
...               the classic server: what Robot's Remote gives directly (classic_parity.resource), but
...               for what only Remote can show (a continuable failure).
Resource          classic_parity.resource
Library           JsonRpcRemote    ${GATEWAY}#upstream    ClassicUpstream    AS    Classic
Library           JsonRpcRemote    ${GATEWAY}#upstream-date    ClassicUpstream    AS    Date
Library           JsonRpcRemote    ${GATEWAY}#upstream-dict    ClassicUpstream    AS    Dict
Library           JsonRpcRemote    ${GATEWAY}#upstream-nested    ClassicUpstream    AS    Nested
Library           JsonRpcRemote    ${GATEWAY}#upstream-named-only    ClassicUpstream    AS    NamedOnly
Library           JsonRpcRemote    ${GATEWAY}#upstream-invalid    ClassicUpstream    AS    Invalid
Library           JsonRpcRemote    ${GATEWAY}#upstream-broken    ClassicUpstream    AS    Broken
Test Setup        Set Library Search Order    Classic

*** Test Cases ***
Text Crosses
    Text Crosses
Numbers And Booleans Cross
    Numbers And Booleans Cross
Bytes Cross
    Bytes Cross
A List Crosses
    A List Crosses
A Dict With Non-String Keys Arrives With String Keys
    A Dict With Non-String Keys Arrives With String Keys
None Arrives As An Empty String
    None Arrives As An Empty String
A Date Arrives As A Datetime And A Timedelta As Seconds
    [Tags]    gap    gap-classic-coercion
    [Setup]    Set Library Search Order    Date
    A Date Arrives As A Datetime And A Timedelta As Seconds
A Dict Result Is Dot-Accessible
    [Tags]    gap    gap-classic-dotdict
    [Setup]    Set Library Search Order    Dict
    A Dict Result Is Dot-Accessible
A Nested Dict Result Is Dot-Accessible
    [Tags]    gap    gap-nested-values
    [Setup]    Set Library Search Order    Nested
    A Nested Dict Result Is Dot-Accessible
No Return Value Is An Empty String
    No Return Value Is An Empty String
A Binary Result Is Bytes
    A Binary Result Is Bytes
Text With Control Characters Comes As Bytes
    Text With Control Characters Comes As Bytes
A Datetime Result
    A Datetime Result
A Tuple Result Is A List
    A Tuple Result Is A List
Positional, Default, Varargs And Kwargs
    Positional, Default, Varargs And Kwargs
Keyword-Only Arguments
    [Tags]    gap    gap-classic-spec
    [Setup]    Set Library Search Order    NamedOnly
    Keyword-Only Arguments
Logs Reach Robot's Log With Their Levels
    Logs Reach Robot's Log With Their Levels
A Failure Carries Its Message
    A Failure Carries Its Message
A Generic Failure Carries Its Message Alone
    A Generic Failure Carries Its Message Alone
The Keyword After A Failure Runs
    The Keyword After A Failure Runs
An Invalid Result Names What Is Wrong
    [Tags]    gap    gap-classic-errors
    [Setup]    Set Library Search Order    Invalid
    An Invalid Result Names What Is Wrong
A Broken Connection Names What Is Wrong
    [Tags]    gap    gap-classic-errors
    [Setup]    Set Library Search Order    Broken
    A Broken Connection Names What Is Wrong

A Failure Carries The Server's Traceback
    Run Keyword And Expect Error
    ...    *message='ValueError: it broke', type=*, traceback='Traceback (most recent call last):*
    ...    Fail With    it broke

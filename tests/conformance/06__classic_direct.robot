*** Settings ***
Documentation     Robot's own Remote library, directly to the classic server: the behaviour the two
...               gateway routes after this suite must match (classic_parity.resource).
Resource          classic_parity.resource
Library           Remote    ${CLASSIC_SERVER}
Library           Remote    ${CLASSIC_SERVER}/old    AS    Old
Test Setup        Set Library Search Order    Remote

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
    A Date Arrives As A Datetime And A Timedelta As Seconds
A Dict Result Is Dot-Accessible
    A Dict Result Is Dot-Accessible
A Nested Dict Result Is Dot-Accessible
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
    Keyword-Only Arguments
Text With Control Characters Goes As Bytes
    Text With Control Characters Goes As Bytes
An Integer Beyond XML-RPC's Range Is Refused
    An Integer Beyond XML-RPC's Range Is Refused
A Binary Dict Key Is Refused
    A Binary Dict Key Is Refused
Values Inside Containers Are Coerced Too
    Values Inside Containers Are Coerced Too
A Binary Failure Message Comes As Text
    A Binary Failure Message Comes As Text
An Older Server Is Asked Keyword By Keyword
    An Older Server Is Asked Keyword By Keyword
Logs Reach Robot's Log With Their Levels
    Logs Reach Robot's Log With Their Levels
A Failure Carries Its Message
    A Failure Carries Its Message
A Generic Failure Carries Its Message Alone
    A Generic Failure Carries Its Message Alone
The Keyword After A Failure Runs
    The Keyword After A Failure Runs
A Continuable Failure Lets The Keyword Go On
    A Continuable Failure Lets The Keyword Go On
An Invalid Result Names What Is Wrong
    An Invalid Result Names What Is Wrong
A Broken Connection Names What Is Wrong
    A Broken Connection Names What Is Wrong

*** Settings ***
Documentation     Robot Framework's standard libraries served by the reference server, through the
...               gateway and directly (the lab's reference server in TCP mode): each keyword has the
...               same outcome both ways, the same value or the same failure.
Library           JsonRpcRemote    ${REFERENCE_SERVER}    String    AS    DirectString
Library           JsonRpcRemote    ${REFERENCE_SERVER}    Collections    AS    DirectCollections
Library           JsonRpcRemote    ${REFERENCE_SERVER}    DateTime    AS    DirectDateTime
Library           JsonRpcRemote    ${REFERENCE_SERVER}    XML    AS    DirectXML
Library           JsonRpcRemote    ${REFERENCE_SERVER}    OperatingSystem    AS    DirectOperatingSystem
Library           JsonRpcRemote    ${GATEWAY}#stdlib    String    AS    GatewayString
Library           JsonRpcRemote    ${GATEWAY}#stdlib    Collections    AS    GatewayCollections
Library           JsonRpcRemote    ${GATEWAY}#stdlib    DateTime    AS    GatewayDateTime
Library           JsonRpcRemote    ${GATEWAY}#stdlib    XML    AS    GatewayXML
Library           JsonRpcRemote    ${GATEWAY}#stdlib    OperatingSystem    AS    GatewayOperatingSystem
Library           JsonRpcRemote    ${GATEWAY}#stdlib-element    XML    AS    ElementXML
Test Template     Same Outcome As Directly

*** Variables ***
${XML_TEXT}       <root><item id="1">one</item><item id="2">two</item></root>

*** Test Cases ***                LIBRARY            KEYWORD                     ARGUMENTS
String                            String             Get Line Count              first\nsecond\nthird
                                  String             Replace String              hello world    world    there
                                  String             Split String                a,b,,c    ,
                                  String             Encode String To Bytes      héllo    UTF-8
                                  String             Decode Bytes To String      ${{'héllo'.encode()}}    UTF-8
                                  String             Should Be Lower Case        NOT LOWER

Collections                       Collections        Combine Lists               ${{[1, 2]}}    ${{(3, 4)}}
                                  Collections        Get Dictionary Keys         ${{{'b': 1, 'a': 2}}}
                                  Collections        Get From Dictionary         ${{{1: 'one'}}}    ${1}
                                  Collections        Convert To List             ${{(1, 'two')}}
                                  Collections        Lists Should Be Equal       ${{[1]}}    ${{[2]}}

DateTime                          DateTime           Convert Date                2024-02-29 12:00:00    result_format=datetime
                                  DateTime           Add Time To Date            2024-02-29 12:00:00    1 day
                                  DateTime           Subtract Date From Date     2024-03-01    2024-02-29
                                  DateTime           Convert Time                1 minute 30 seconds    timedelta
                                  DateTime           Convert Date                ${{datetime.date(2024, 2, 29)}}    result_format=%d.%m.%Y

XML As Text                       XML                Get Element Text            ${XML_TEXT}    item
                                  XML                Get Element Count           ${XML_TEXT}    item
                                  XML                Get Elements Texts          ${XML_TEXT}    item
                                  XML                Element Attribute Should Be    ${XML_TEXT}    id    2    item

XML Elements
    [Tags]    gap    gap-allowlist
    [Template]    Same Outcome Both Ways
    DirectXML    ElementXML    Parse XML    ${XML_TEXT}
    DirectXML    ElementXML    Get Element    ${XML_TEXT}    item

OperatingSystem                   OperatingSystem    Join Path                   ${LAB_DIR}    gateway.toml
                                  OperatingSystem    Normalize Path              ${LAB_DIR}/../lab/./gateway.toml
                                  OperatingSystem    File Should Exist           ${LAB_DIR}/gateway.toml
                                  OperatingSystem    Get File Size               ${LAB_DIR}/gateway.toml
                                  OperatingSystem    File Should Exist           ${LAB_DIR}/no-such-file
                                  OperatingSystem    Join Path                   ${{pathlib.Path('/tmp')}}    x

*** Keywords ***
Same Outcome As Directly
    [Arguments]    ${library}    ${keyword}    @{arguments}
    Same Outcome Both Ways    Direct${library}    Gateway${library}    ${keyword}    @{arguments}

Same Outcome Both Ways
    [Documentation]    Runs KEYWORD of the import DIRECT (the reference server) and of the import THROUGH
    ...    (the gateway): both pass with the same value, or both fail with the same message (in which
    ...    Robot names the import). An XML element is compared as its text.
    [Arguments]    ${direct}    ${through}    ${keyword}    @{arguments}
    ${expected} =    Run Keyword And Ignore Error    ${direct}.${keyword}    @{arguments}
    ${outcome} =    Run Keyword And Ignore Error    ${through}.${keyword}    @{arguments}
    ${expected} =    Comparable    ${expected}    ${direct}
    ${outcome} =    Comparable    ${outcome}    ${through}
    Should Be Equal    ${outcome}    ${expected}
    ...    ${keyword}: ${expected}[0] directly (${expected}[1]), ${outcome}[0] through the gateway (${outcome}[1])
    ...    values=False

Comparable
    [Arguments]    ${outcome}    ${import}
    ${status}    ${value} =    Set Variable    ${outcome}
    IF    $status == 'FAIL'    RETURN    ${{('FAIL', $value.replace($import + '.', 'IMPORT.'))}}
    ${element} =    Evaluate    isinstance($value, xml.etree.ElementTree.Element)    modules=xml.etree.ElementTree
    IF    ${element}    RETURN    ${{('PASS', xml.etree.ElementTree.tostring($value))}}
    RETURN    ${outcome}

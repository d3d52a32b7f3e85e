import * as cdktf from 'cdktf';
export class WidgetStatusOutputReference extends cdktf.ComplexObject {
  // code - computed: true, optional: false, required: false
  public get code() {
    return this.getNumberAttribute('code');
  }

  // reasons - computed: true, optional: false, required: false
  public get reasons() {
    return cdktf.Fn.tolist(this.getListAttribute('reasons'));
  }
}
export class WidgetRuleTargetOutputReference extends cdktf.ComplexObject {
  // arn - computed: false, optional: false, required: true
  private _arn?: string;
  public get arn() {
    return this.getStringAttribute('arn');
  }
}
export class WidgetRuleOutputReference extends cdktf.ComplexObject {
  // port - computed: false, optional: false, required: true
  private _port?: number;
  public get port() {
    return this.getNumberAttribute('port');
  }

  // cidrs - computed: true, optional: true, required: false
  private _cidrs?: string[];
  public get cidrs() {
    return cdktf.Fn.tolist(this.getListAttribute('cidrs'));
  }

  // target - computed: false, optional: false, required: true
  private _target = new WidgetRuleTargetOutputReference(this, "target");
}
export class Widget extends cdktf.TerraformResource {
  public static readonly tfResourceType = "aws_widget";

  // arn - computed: true, optional: false, required: false
  public get arn() {
    return this.getStringAttribute('arn');
  }

  // labels - computed: false, optional: true, required: false
  private _labels?: { [key: string]: string };

  // matrix - computed: false, optional: true, required: false
  private _matrix?: number[][];

  // name - computed: false, optional: false, required: true
  private _name?: string;

  // status - computed: true, optional: false, required: false
  private _status = new WidgetStatusList(this, "status", true);

  // tags_all - computed: true, optional: false, required: false
  private _tagsAll = new cdktf.StringMap(this, "tags_all");

  // rule - computed: false, optional: true, required: false
  private _rule = new WidgetRuleList(this, "rule", true);

  // timeouts - computed: false, optional: true, required: false
  private _timeouts = new WidgetTimeoutsOutputReference(this, "timeouts");
}
